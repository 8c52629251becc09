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
