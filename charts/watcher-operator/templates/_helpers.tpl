{{/* Labels of every object: the same part-of label as deploy/, plus Helm's. */}}
{{- define "watcher-operator.labels" -}}
app.kubernetes.io/part-of: watcher-operator
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The operator's pods. */}}
{{- define "watcher-operator.selector" -}}
app.kubernetes.io/name: watcher-operator
{{- end }}

{{/* Whether a controller is enabled: include "watcher-operator.runs" (list . "sync") */}}
{{- define "watcher-operator.runs" -}}
{{- if has (index . 1) (index . 0).Values.controllers }}true{{ end }}
{{- end }}
