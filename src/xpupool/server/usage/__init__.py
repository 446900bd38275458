"""Metering (issue 52): what each tenant's replica runs held, in card-seconds, device-memory
GiB-seconds, normalised compute and energy; recorded by ``meter.py``, read by ``query.py``."""
