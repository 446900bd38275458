{{/* Names and labels shared by every template. */}}

{{- define "xpupool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: the release name, with "-xpupool" unless it has it. */}}
{{- define "xpupool.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "xpupool.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "xpupool.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "xpupool.agent.fullname" -}}
{{- printf "%s-node-agent" (include "xpupool.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "xpupool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "xpupool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "xpupool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "xpupool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "xpupool.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Where the pods mount the metrics token (metricsToken.secretName): one file, "token". */}}
{{- define "xpupool.metricsTokenDir" -}}/var/run/xpupool-metrics{{- end -}}

{{/* The scrape token's argument, mount and volume of a metrics container: included only when
metricsToken.secretName is set. */}}
{{- define "xpupool.metricsTokenArg" -}}
- --metrics-token-file={{ include "xpupool.metricsTokenDir" . }}/token
{{- end -}}

{{- define "xpupool.metricsTokenMount" -}}
- name: metrics-token
  mountPath: {{ include "xpupool.metricsTokenDir" . }}
  readOnly: true
{{- end -}}

{{- define "xpupool.metricsTokenVolume" -}}
- name: metrics-token
  secret:
    secretName: {{ .Values.metricsToken.secretName }}
    items:
      - key: {{ .Values.metricsToken.secretKey }}
        path: token
{{- end -}}

{{/* Where the scheduler pod mounts its ConfigMap. */}}
{{- define "xpupool.configDir" -}}/etc/xpupool{{- end -}}

{{- define "xpupool.server.fullname" -}}
{{- printf "%s-server" (include "xpupool.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The control plane's user name as the apiserver sees it (its pod's service account). */}}
{{- define "xpupool.server.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "xpupool.server.fullname" . }}
{{- end -}}

{{/* The ClusterRole the plane holds in each tenant namespace (through a RoleBinding there). */}}
{{- define "xpupool.server.tenantRole" -}}
{{- printf "%s-tenant" (include "xpupool.server.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The tenant namespaces, one per line, sorted, without repeats: server.tenantNamespaces and
the namespaces of the sites file's fixed mapping (server.namespaces). */}}
{{- define "xpupool.server.tenantNamespaces" -}}
{{- $all := concat .Values.server.tenantNamespaces (values .Values.server.namespaces) | uniq | sortAlpha -}}
{{- join "\n" $all -}}
{{- end -}}

{{/* The scheduling gate the plane admits kubectl users' pods through. */}}
{{- define "xpupool.admissionGate" -}}xpupool.io/admission{{- end -}}
