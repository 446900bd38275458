"""Cluster state as columns: every filter and scorer works on whole arrays, never per node in Python.

Nodes are rows (``[N]``); devices are a dense ``[N, W]`` grid, one row per node, padded with absent
slots so that ``W`` is a multiple of 8. The padding lets a row of booleans be read as whole 64-bit
words, so "how many devices of each node pass" is one ``bitwise_count`` over ``N * W / 8`` words.
A device's *slot* is its flat index ``node * W + column``.

Capacity is integer: memory in MiB, CPU in millicores, device compute in thousandths of a device,
task slots in tasks (one per share on a device; ``capacity.UNLIMITED_TASKS`` where the card has no
limit). A card's free memory and compute count down from what may be committed on it
(``dev_mem_commit``, ``dev_core_commit``: the physical amount times the operator's over-commit
factor, rounded down; ``dev_mem_total`` stays physical). Whether a share fits is decided by
``capacity.share_fits`` (or its compiled scalar form), here as everywhere. Allocation and release
add and subtract the same integers, so a release restores the state bit for bit. Static facts
(model, vendor, driver, card size, health, cordon, task limits, over-commit factors) change rarely;
each change bumps ``epoch`` so that cached per-request masks are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from xpupool.catalog import AcceleratorCatalog, CompatTable, load_accelerators, load_compat
from xpupool.engine.capacity import UNLIMITED_TASKS, share_fits_one
from xpupool.engine.link_domains import LinkDomains
from xpupool.engine.lru import Lru
from xpupool.engine.taint_columns import TaintColumns
from xpupool.model.allocation import Allocation, DeviceShare
from xpupool.model.device import Device, Node
from xpupool.model.errors import Conflict, NotFound, OverCommit, RequestError
from xpupool.model.request import WHOLE
from xpupool.model.vendor import VENDOR_KEYS

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
# Small per-node counts of cards (int8 where the grid is narrow enough, else int64).
CountArray = npt.NDArray[np.int8] | npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SoftwareProfile:
    """What software a device can serve is decided by (vendor, driver, reported runtimes)."""

    vendor: str
    driver_version: str | None
    runtimes: tuple[tuple[str, str], ...]


# Allocation changes the state remembers at least (``changed_since``): far more than a cache falls
# behind between two uses. The log holds twice that (1 MB) and forgets the older half when full.
CHANGE_LOG = 1 << 16


def _width_for(max_devices: int) -> int:
    return max(8, -(-max_devices // 8) * 8)


class ClusterState:
    """All nodes and devices of one pool, plus what is allocated on them.

    Build it from :class:`~xpupool.model.device.Node` records; change it only through
    :meth:`apply`/:meth:`revert` (allocations) and the inventory methods (add, remove, cordon,
    health). Tie-breaking between equal scores uses ``rank``: a permutation of nodes drawn from
    ``seed`` once, so a run is deterministic for a given state, request sequence and seed.
    """

    def __init__(
        self,
        nodes: Iterable[Node] = (),
        *,
        seed: int = 0,
        catalog: AcceleratorCatalog | None = None,
        compat: CompatTable | None = None,
    ) -> None:
        self.catalog = catalog if catalog is not None else load_accelerators()
        self.compat = compat if compat is not None else load_compat()
        self.seed = seed
        self.epoch = 0
        # The node of every allocation change, in order (``changed_since``): caches that follow
        # the state re-check those nodes only. ``_changes[0]`` is change number ``_changes_base``,
        # and the first ``_n_changes`` entries are in use. An array, so that a reader gets its
        # rows as a slice without converting a list.
        self._changes = np.zeros(2 * CHANGE_LOG, np.int64)
        self._n_changes = 0
        self._changes_base = 0
        self.node_names: list[str] = []
        self.node_index: dict[str, int] = {}
        self.nodes: list[Node] = []
        self.sites: list[str] = []
        self.models: list[tuple[str, str]] = []  # (vendor, printed model) per model id
        self._model_ids: dict[tuple[str, str], int] = {}
        # Registered type strings (Device.type_name, else the model) per type id, upper-cased for
        # the case-insensitive substring match of DeviceRequest.type_contains.
        self.type_names: list[str] = []
        self._type_ids: dict[str, int] = {}
        # Registered sharing modes (Device.share_mode) per mode id, for DeviceRequest.share_modes.
        self.share_modes: list[str] = []
        self._share_mode_ids: dict[str, int] = {}
        # Hardware partitions (Device.partition) per partition id: (model id, profile name).
        self.partitions: list[tuple[int, str]] = []
        self._partition_ids: dict[tuple[int, str], int] = {}
        self.profiles: list[SoftwareProfile] = []
        self._profile_ids: dict[SoftwareProfile, int] = {}
        self.uuid_slot: dict[str, int] = {}
        self.slot_uuid: dict[int, str] = {}
        self.live: dict[int, Allocation] = {}
        self._build(list(nodes))

    # ------------------------------------------------------------------ construction
    def _build(self, nodes: list[Node]) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise RequestError("nodes.name", dup, "duplicate node name")
        n = len(nodes)
        w = _width_for(max((len(x.devices) for x in nodes), default=0))
        self.width = w
        self.node_cpu_total = np.zeros(n, np.int64)
        self.node_mem_total = np.zeros(n, np.int64)
        self.node_schedulable = np.zeros(n, np.bool_)
        self.node_alive = np.zeros(n, np.bool_)
        self.node_container = np.zeros(n, np.bool_)  # has a container runtime
        self.node_site = np.zeros(n, np.int32)
        self.node_n_dev = np.zeros(n, np.int64)
        self.dev_present = np.zeros((n, w), np.bool_)
        self.dev_mem_total = np.zeros((n, w), np.int64)
        self.dev_healthy = np.zeros((n, w), np.bool_)
        self.dev_cordoned = np.zeros((n, w), np.bool_)
        self.dev_model = np.full((n, w), -1, np.int32)
        self.dev_type = np.full((n, w), -1, np.int32)
        self.dev_mode = np.full((n, w), -1, np.int32)  # -1: the node states no sharing mode
        self.dev_partition = np.full((n, w), -1, np.int32)  # -1: not a hardware partition
        self.dev_vendor = np.full((n, w), -1, np.int16)
        self.dev_profile = np.full((n, w), -1, np.int32)
        self.dev_card_mib = np.zeros((n, w), np.int64)
        self.dev_task_total = np.zeros((n, w), np.int64)
        self.dev_mem_commit = np.zeros((n, w), np.int64)
        self.dev_core_commit = np.zeros((n, w), np.int64)
        self.dev_group = np.full((n, w), -1, np.int32)
        self.group_node: list[int] = []
        # NUMA nodes as groups, numbered as link groups are (global, contiguous per node)
        self.dev_numa = np.full((n, w), -1, np.int32)
        self.numa_group_node: list[int] = []
        for i, node in enumerate(nodes):
            self._fill_row(i, node)
        self.node_cpu_free = self.node_cpu_total.copy()
        self.node_mem_free = self.node_mem_total.copy()
        self.dev_mem_free = self.dev_mem_commit.copy()
        self.dev_core_free = self.dev_core_commit.copy()
        self.dev_task_free = self.dev_task_total.copy()
        self._build_placement_masks(nodes)
        self.rank = np.random.default_rng(self.seed).permutation(n).astype(np.int64)
        self.node_version = np.zeros(n, np.int64)
        self.node_allocations: list[dict[int, Allocation]] = [{} for _ in range(n)]
        self._refresh_derived()

    def _fill_row(self, i: int, node: Node) -> None:
        self.node_names.append(node.name)
        self.node_index[node.name] = i
        self.nodes.append(node)
        if node.site not in self.sites:
            self.sites.append(node.site)
        self.node_site[i] = self.sites.index(node.site)
        self.node_cpu_total[i] = node.cpu_milli
        self.node_mem_total[i] = node.memory_mib
        self.node_schedulable[i] = node.schedulable
        self.node_alive[i] = True
        self.node_container[i] = node.container_runtime is not None
        self.node_n_dev[i] = len(node.devices)
        groups: dict[str, int] = {}
        numas: dict[int, int] = {}
        for col, dev in enumerate(node.devices):
            slot = i * self.width + col
            if dev.uuid in self.uuid_slot:
                raise RequestError(
                    f"nodes[{node.name}].devices[{col}].uuid", dev.uuid, "duplicate UUID"
                )
            self.uuid_slot[dev.uuid] = slot
            self.slot_uuid[slot] = dev.uuid
            self.dev_present[i, col] = True
            self.dev_mem_total[i, col] = dev.memory_mib
            self.dev_mem_commit[i, col] = committable(dev.memory_mib, dev.memory_overcommit)
            self.dev_core_commit[i, col] = committable(WHOLE, dev.cores_overcommit)
            self.dev_healthy[i, col] = dev.healthy
            self.dev_cordoned[i, col] = dev.uuid in node.cordoned_devices
            self.dev_model[i, col] = self._model_id(dev)
            self.dev_type[i, col] = self._type_id(dev)
            self.dev_mode[i, col] = self._share_mode_id(dev.share_mode)
            if dev.partition is not None:
                self.dev_partition[i, col] = self._partition_id(int(self.dev_model[i, col]), dev)
            self.dev_vendor[i, col] = VENDOR_KEYS.index(dev.vendor)
            self.dev_profile[i, col] = self._profile_id(dev)
            self.dev_card_mib[i, col] = self._card_mib(dev)
            self.dev_task_total[i, col] = (
                UNLIMITED_TASKS if dev.max_tasks is None else dev.max_tasks
            )
            if dev.link_group is not None:
                if dev.link_group not in groups:
                    groups[dev.link_group] = len(self.group_node)
                    self.group_node.append(i)
                self.dev_group[i, col] = groups[dev.link_group]
            if dev.numa_node is not None:
                if dev.numa_node not in numas:
                    numas[dev.numa_node] = len(self.numa_group_node)
                    self.numa_group_node.append(i)
                self.dev_numa[i, col] = numas[dev.numa_node]

    def _build_placement_masks(self, nodes: list[Node]) -> None:
        """Per site, the ``[N]`` mask of its nodes; per label, each node's value id (-1: the node
        lacks the label); the nodes' taints as columns (``taint_columns.py``). Sites, labels and
        taints change only with a rebuild, so the masks a request asks for are made once and
        then looked up (:meth:`site_mask`, :meth:`label_mask`, ``taint_columns.answer``)."""
        n = len(nodes)
        self.site_nodes: dict[str, BoolArray] = {
            site: self.node_site == i for i, site in enumerate(self.sites)
        }
        self.label_values: dict[str, dict[str, int]] = {}
        self.node_label: dict[str, npt.NDArray[np.int32]] = {}
        for i, node in enumerate(nodes):
            for label, value in node.labels.items():
                values = self.label_values.setdefault(label, {})
                column = self.node_label.get(label)
                if column is None:
                    column = self.node_label[label] = np.full(n, -1, np.int32)
                column[i] = values.setdefault(value, len(values))
        self.taint_columns = TaintColumns(nodes)
        self.link_domains = LinkDomains(nodes, self.node_site, len(self.sites))
        # Nodes without devices, and whether the pool has them beside nodes with devices: only
        # then may the cpu-only scorer tell nodes apart (scorers/cpu_only.py).
        self.node_no_devices = self.node_n_dev == 0
        self.mixed_devices = bool(self.node_no_devices.any() and not self.node_no_devices.all())
        self.no_nodes = np.zeros(n, np.bool_)
        # a few dozen distinct asks in use; the bound only stops a long-running server's pile-up
        self._site_masks: Lru[tuple[tuple[str, ...], tuple[str, ...]], BoolArray] = Lru(256)
        self._label_masks: Lru[tuple[tuple[str, str], ...], BoolArray] = Lru(256)

    def site_mask(self, sites: tuple[str, ...], exclude: tuple[str, ...] = ()) -> BoolArray:
        """``[N]`` nodes in one of ``sites`` (any site when empty) and in none of ``exclude``;
        made once per distinct pair (sites change only with a rebuild). A site no node has
        matches nothing."""
        key = (sites, exclude)
        found = self._site_masks.get(key)
        if found is None:
            found = self.no_nodes.copy() if sites else ~self.no_nodes
            for site in sites:
                found |= self.site_nodes.get(site, self.no_nodes)
            for site in exclude:
                found &= ~self.site_nodes.get(site, self.no_nodes)
            self._site_masks.put(key, found)
        return found

    def label_mask(self, selector: tuple[tuple[str, str], ...]) -> BoolArray:
        """``[N]`` nodes that carry every (label, value) of ``selector``; made once per selector."""
        found = self._label_masks.get(selector)
        if found is None:
            found = ~self.no_nodes
            for label, value in selector:
                value_id = self.label_values.get(label, {}).get(value)
                if value_id is None:
                    found = self.no_nodes
                    break
                found = found & (self.node_label[label] == value_id)
            self._label_masks.put(selector, found)
        return found

    def _model_id(self, dev: Device) -> int:
        key = (dev.vendor, dev.model)
        found = self._model_ids.get(key)
        if found is None:
            found = self._model_ids[key] = len(self.models)
            self.models.append(key)
        return found

    def _type_id(self, dev: Device) -> int:
        key = (dev.model if dev.type_name is None else dev.type_name).upper()
        found = self._type_ids.get(key)
        if found is None:
            found = self._type_ids[key] = len(self.type_names)
            self.type_names.append(key)
        return found

    def _share_mode_id(self, mode: str | None) -> int:
        if mode is None:
            return -1
        found = self._share_mode_ids.get(mode)
        if found is None:
            found = self._share_mode_ids[mode] = len(self.share_modes)
            self.share_modes.append(mode)
        return found

    def _partition_id(self, model: int, dev: Device) -> int:
        key = (model, str(dev.partition))
        found = self._partition_ids.get(key)
        if found is None:
            found = self._partition_ids[key] = len(self.partitions)
            self.partitions.append(key)
        return found

    def _profile_id(self, dev: Device) -> int:
        profile = SoftwareProfile(
            dev.vendor, dev.driver_version, tuple(sorted(dev.runtimes.items()))
        )
        found = self._profile_ids.get(profile)
        if found is None:
            found = self._profile_ids[profile] = len(self.profiles)
            self.profiles.append(profile)
        return found

    def _card_mib(self, dev: Device) -> int:
        """Nominal card size: the catalog's marketed size when the model is known, else as reported."""
        known = self.catalog.lookup(dev.model, dev.vendor)
        return int(known.memory_gib * 1024) if known is not None else dev.memory_mib

    def _refresh_derived(self) -> None:
        """Recompute per-node sums and the static usability mask after an inventory change."""
        self.epoch += 1
        self.dev_usable = self.dev_present & self.dev_healthy & ~self.dev_cordoned
        # Some card is a hardware partition: only then does the partition filter mask anything
        # for a request that asks for none (filters/device_partition.py).
        self.has_partitions = bool((self.dev_partition >= 0).any())
        self.node_ok = self.node_schedulable & self.node_alive
        # Some card limits its tasks: the task-slot filter and the scorers' twin test look then.
        self.tasks_limited = bool((self.dev_task_total[self.dev_present] < UNLIMITED_TASKS).any())
        # What may be committed per node (physical where no factor is set): usage ratios stay <= 1.
        self.node_dev_mem_total = self.dev_mem_commit.sum(axis=1)
        self.node_dev_mem_free = self.dev_mem_free.sum(axis=1)
        self.node_dev_core_total = self.dev_core_commit.sum(axis=1)
        self.node_dev_core_free = self.dev_core_free.sum(axis=1)
        self.inv_dev_mem_total = _inverse(self.node_dev_mem_total)
        self.inv_dev_core_total = _inverse(self.node_dev_core_total)
        self.inv_cpu_total = _inverse(self.node_cpu_total)
        self.inv_mem_total = _inverse(self.node_mem_total)
        group_node_arr = np.asarray(self.group_node, np.int64)
        self.group_owner_nodes, self.group_starts = np.unique(group_node_arr, return_index=True)
        numa_node_arr = np.asarray(self.numa_group_node, np.int64)
        self.numa_owner_nodes, self.numa_starts = np.unique(numa_node_arr, return_index=True)

    # ------------------------------------------------------------------ sizes
    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_devices(self) -> int:
        return int(self.dev_present.sum())

    def node_of_slot(self, slot: int) -> int:
        return slot // self.width

    # ------------------------------------------------------------------ allocations
    def apply(self, alloc: Allocation) -> None:
        """Take what ``alloc`` holds. Raises OverCommit (and changes nothing) if it would
        over-commit, Conflict if it is applied already."""
        if alloc.id in self.live:
            raise Conflict(f"allocation {alloc.id} is already applied")
        n = alloc.node_index
        if self.node_cpu_free[n] < alloc.cpu_milli or self.node_mem_free[n] < alloc.memory_mib:
            raise OverCommit(alloc.id, alloc.node, None)
        mem_free = self.dev_mem_free.reshape(-1)
        core_free = self.dev_core_free.reshape(-1)
        task_free = self.dev_task_free.reshape(-1)
        for share in alloc.devices:
            slot = share.slot
            if not share_fits_one(  # the compiled scalar form: no array made per share
                mem_free[slot],
                core_free[slot],
                task_free[slot],
                share.memory_mib,
                share.core_permille,
            ):
                raise OverCommit(alloc.id, alloc.node, share.uuid)
        self._shift(alloc, -1)
        self.live[alloc.id] = alloc
        self.node_allocations[n][alloc.id] = alloc

    def revert(self, alloc_id: int) -> Allocation:
        """Give back exactly what :meth:`apply` took for ``alloc_id`` and return that allocation.

        Raises Conflict for an allocation that is not applied (a double release).
        """
        alloc = self.live.pop(alloc_id, None)
        if alloc is None:
            raise Conflict(f"allocation {alloc_id} is not applied")
        del self.node_allocations[alloc.node_index][alloc_id]
        self._shift(alloc, +1)
        return alloc

    @property
    def change_seq(self) -> int:
        """How many allocation changes (applies and reverts) the state has seen."""
        return self._changes_base + self._n_changes

    def changed_since(self, seq: int) -> IntArray | None:
        """The nodes changed since change number ``seq`` (repeats possible; a view, good until the
        next change), or None when the log no longer reaches back that far. Inventory changes are
        not in it: they bump ``epoch``."""
        start = seq - self._changes_base
        return None if start < 0 else self._changes[start : self._n_changes]

    def changed_nodes(self, seq: int, epoch: int, version: IntArray) -> IntArray:
        """The nodes a reader that was current at change ``seq`` of ``epoch`` must look at again:
        those changed since, from the log (repeats possible; a view, good until the next change);
        where the epoch moved or the log no longer reaches back that far, every node whose
        ``version`` (the reader's, per node) is not the state's."""
        changed = self.changed_since(seq) if epoch == self.epoch else None
        return np.flatnonzero(version != self.node_version) if changed is None else changed

    def _shift(self, alloc: Allocation, sign: int) -> None:
        n = alloc.node_index
        self.node_version[n] += 1
        if self._n_changes == self._changes.size:  # forget the older half: their readers recompute
            self._changes[:CHANGE_LOG] = self._changes[CHANGE_LOG:]
            self._n_changes -= CHANGE_LOG
            self._changes_base += CHANGE_LOG
        self._changes[self._n_changes] = n
        self._n_changes += 1
        self.node_cpu_free[n] += sign * alloc.cpu_milli
        self.node_mem_free[n] += sign * alloc.memory_mib
        mem_free = self.dev_mem_free.reshape(-1)
        core_free = self.dev_core_free.reshape(-1)
        task_free = self.dev_task_free.reshape(-1)
        for share in alloc.devices:
            mem_free[share.slot] += sign * share.memory_mib
            core_free[share.slot] += sign * share.core_permille
            task_free[share.slot] += sign
            self.node_dev_mem_free[n] += sign * share.memory_mib
            self.node_dev_core_free[n] += sign * share.core_permille

    # ------------------------------------------------------------------ inventory
    _NODE_MUTABLE = ("node_cpu_free", "node_mem_free", "node_schedulable", "node_alive")
    _DEVICE_MUTABLE = (
        "dev_mem_free",
        "dev_core_free",
        "dev_task_free",
        "dev_healthy",
        "dev_cordoned",
    )

    def add_node(self, node: Node) -> int:
        """Append a node. Rebuilds the columns (registration is rare, placement is not) and carries
        over usage, cordons and health; new nodes go last in tie order so existing choices hold."""
        if node.name in self.node_index:
            raise Conflict(f"node {node.name!r} already exists")
        n_old, w_old = self.n_nodes, self.width
        kept = {name: getattr(self, name) for name in (*self._NODE_MUTABLE, *self._DEVICE_MUTABLE)}
        old_rank, live, kept_version = self.rank, self.live, self.node_version
        nodes = [*self.nodes, node]
        self.node_names, self.node_index, self.nodes, self.sites = [], {}, [], []
        self.uuid_slot, self.slot_uuid = {}, {}
        self._build(nodes)
        for name in self._NODE_MUTABLE:
            getattr(self, name)[:n_old] = kept[name]
        for name in self._DEVICE_MUTABLE:
            getattr(self, name)[:n_old, :w_old] = kept[name]
        self.rank = np.concatenate([old_rank, np.asarray([n_old], np.int64)])
        self.node_version[:n_old] = kept_version
        self.live = {k: self.readdress(a) for k, a in live.items()}  # the grid widened
        for alloc in self.live.values():
            self.node_allocations[alloc.node_index][alloc.id] = alloc
        self._refresh_derived()
        return n_old

    def readdress(self, alloc: Allocation) -> Allocation:
        """``alloc`` with this state's node index and device slots. Raises Conflict, naming why,
        when its node is not here or is removed, or one of its cards is not here or is another
        node's.

        An allocation names its node and cards (what a store or a pod keeps) and also carries the
        node index and slots of the state it was placed in; those change when an engine is
        rebuilt or its grid widens, so an allocation kept across is re-addressed before it is
        applied again. The fronts once did this three ways, and only the Kubernetes one refused a
        removed node or another node's card: an allocation naming node A and a card of node B
        was applied to B's card and charged to A (issue 44, item 1). This is the one way."""
        node = self.node_index.get(alloc.node)
        if node is None or not self.node_alive[node]:
            raise Conflict(f"allocation {alloc.id}: node {alloc.node} is not in the pool")
        shares = []
        for d in alloc.devices:
            slot = self.uuid_slot.get(d.uuid)
            if slot is None:
                raise Conflict(f"allocation {alloc.id}: device {d.uuid} is not in the pool")
            if self.node_of_slot(slot) != node:
                owner = self.node_names[self.node_of_slot(slot)]
                raise Conflict(
                    f"allocation {alloc.id}: device {d.uuid} is node {owner}'s, not {alloc.node}'s"
                )
            shares.append(DeviceShare(d.uuid, slot, d.memory_mib, d.core_permille))
        return Allocation(
            alloc.id,
            alloc.request_name,
            alloc.replica,
            alloc.node,
            node,
            alloc.cpu_milli,
            alloc.memory_mib,
            tuple(shares),
            alloc.priority,
            alloc.guaranteed,
        )

    def remove_node(self, name: str) -> None:
        """Take a node out of scheduling for good. Refuses while allocations still use it."""
        i = self._node(name)
        if self.node_allocations[i]:
            raise Conflict(f"node {name!r} still holds allocations")
        self.node_alive[i] = False
        self._refresh_derived()

    def set_node_schedulable(self, name: str, schedulable: bool) -> None:
        """Cordon (False) or uncordon (True) a node; running allocations stay."""
        self.node_schedulable[self._node(name)] = schedulable
        self._refresh_derived()

    def set_device_cordoned(self, uuid: str, cordoned: bool) -> None:
        self.dev_cordoned.reshape(-1)[self._slot(uuid)] = cordoned
        self._refresh_derived()

    def set_device_health(self, uuid: str, healthy: bool) -> None:
        self.dev_healthy.reshape(-1)[self._slot(uuid)] = healthy
        self._refresh_derived()

    def _node(self, name: str) -> int:
        try:
            return self.node_index[name]
        except KeyError:
            raise NotFound("node", name) from None

    def _slot(self, uuid: str) -> int:
        try:
            return self.uuid_slot[uuid]
        except KeyError:
            raise NotFound("device", uuid) from None


def committable(physical: int, factor: float) -> int:
    """What may be committed of ``physical`` under an over-commit ``factor``: rounded down, so the
    scheduler never exceeds the factor; exactly ``physical`` at 1.0."""
    return physical if factor == 1.0 else math.floor(physical * factor)


def _inverse(values: IntArray) -> FloatArray:
    """1/x where x > 0, else 0: lets scorers divide by capacity without branching on empty nodes."""
    out = np.zeros(values.shape, np.float64)
    np.divide(1.0, values, out=out, where=values > 0)
    return out
