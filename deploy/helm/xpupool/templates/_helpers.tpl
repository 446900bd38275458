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

{{/* Where the scheduler pod mounts its ConfigMap. */}}
{{- define "xpupool.configDir" -}}/etc/xpupool{{- end -}}
