{{/* Chart name. */}}
{{- define "gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart, unless the release name already holds the chart name. */}}
{{- define "gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gateway.labels" -}}
helm.sh/chart: {{ include "gateway.chart" . }}
{{ include "gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: agent-gateway
{{- end }}

{{- define "gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The container port of /healthz, /readyz and /metrics: the internal one when set. */}}
{{- define "gateway.opsPort" -}}
{{- if .Values.config.internalPort }}internal{{ else }}http{{ end }}
{{- end }}

{{/* The label that tells the internal Service (the ServiceMonitor's) from the client one. */}}
{{- define "gateway.internalServiceLabel" -}}
agent-gateway/service: internal
{{- end }}

{{- define "gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
An environment value as the gateway parses it. Helm reads every number in values as a
float64, and printing one gives 2.68435456e+08 for 268435456: whole numbers are printed
as integers.
*/}}
{{- define "gateway.envValue" -}}
{{- if kindIs "float64" . }}
{{- if eq . (float64 (int64 .)) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* Checks that refuse values which would deploy a broken gateway. */}}
{{- define "gateway.validate" -}}
{{- $drain := float64 .Values.config.drainSeconds }}
{{- $pause := float64 .Values.preStopSleepSeconds }}
{{- $grace := float64 .Values.terminationGracePeriodSeconds }}
{{- if le $grace (addf $pause $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be greater than preStopSleepSeconds (%v) + config.drainSeconds (%v): the kubelet would kill the pod before its streams are drained" .Values.terminationGracePeriodSeconds .Values.preStopSleepSeconds .Values.config.drainSeconds) }}
{{- end }}
{{- if and .Values.config.internalPort (eq (int .Values.config.internalPort) (int .Values.config.port)) }}
{{- fail "config.internalPort must differ from config.port" }}
{{- end }}
{{- if and .Values.config.internalHost (not .Values.config.internalPort) }}
{{- fail "config.internalHost needs config.internalPort" }}
{{- end }}
{{- if .Values.redis.embedded }}
{{- if or .Values.redis.existingSecret .Values.redis.url }}
{{- fail "redis.embedded=true runs without Redis: unset redis.existingSecret and redis.url" }}
{{- end }}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}
{{- fail "redis.embedded=true keeps the feeds in one pod's memory: use replicaCount 1 and autoscaling.enabled=false, or configure Redis" }}
{{- end }}
{{- else if .Values.redis.sentinel.enabled }}
{{- if or (not .Values.redis.sentinel.hosts) (not .Values.redis.sentinel.masterName) }}
{{- fail "redis.sentinel.enabled=true needs redis.sentinel.hosts and redis.sentinel.masterName" }}
{{- end }}
{{- else }}
{{- if and .Values.redis.existingSecret .Values.redis.url }}
{{- fail "set one of redis.existingSecret and redis.url, not both" }}
{{- end }}
{{- if not (or .Values.redis.existingSecret .Values.redis.url) }}
{{- fail "Redis is required: set redis.existingSecret (a Secret holding the URL) or redis.url (or redis.embedded=true for a single in-memory pod)" }}
{{- end }}
{{- if regexMatch "^[a-z]+://[^/]*@" .Values.redis.url }}
{{- fail "redis.url carries credentials: put the URL in a Secret and set redis.existingSecret instead" }}
{{- end }}
{{- end }}
{{- if and .Values.podDisruptionBudget.enabled (hasKey .Values.podDisruptionBudget "minAvailable") (hasKey .Values.podDisruptionBudget "maxUnavailable") }}
{{- fail "podDisruptionBudget: set minAvailable or maxUnavailable, not both" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas must be at least autoscaling.minReplicas" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (not (or .Values.autoscaling.targetCPUUtilizationPercentage .Values.autoscaling.connectionsPerPod.enabled)) }}
{{- fail "autoscaling needs a metric: targetCPUUtilizationPercentage or connectionsPerPod.enabled" }}
{{- end }}
{{- if and .Values.autoscaling.enabled .Values.autoscaling.targetCPUUtilizationPercentage (not (dig "requests" "cpu" "" .Values.resources)) }}
{{- fail "autoscaling on CPU needs resources.requests.cpu" }}
{{- end }}
{{- end }}
