{{- define "cbop.labels" -}}
app.kubernetes.io/name: cbop
app.kubernetes.io/part-of: cbop
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "cbop.selectorLabels" -}}
app.kubernetes.io/name: cbop
app.kubernetes.io/component: controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cbop.sharded" -}}
{{- if gt (int .Values.sharding.shards) 1 -}}
{{- if not .Values.leaderElection.enabled -}}
{{- fail "sharding.shards > 1 needs leaderElection.enabled" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{- define "cbop.replicas" -}}
{{- if not (kindIs "invalid" .Values.replicas) -}}
{{ .Values.replicas }}
{{- else if include "cbop.sharded" . -}}
{{ int .Values.sharding.shards }}
{{- else -}}
2
{{- end -}}
{{- end -}}
