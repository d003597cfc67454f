{{- define "lab.name" -}}{{ .Release.Name }}-lab{{- end -}}

{{- define "lab.labels" -}}
app.kubernetes.io/part-of: lab
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- /* Selector of one component's pods; the argument is (list $root $name). */ -}}
{{- define "lab.selector" -}}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- /* The image of a service: the chart-wide image, overridden field by field by services.<name>.image. */ -}}
{{- define "lab.image" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- $img := mergeOverwrite (deepCopy $root.Values.image) ($svc.image | default dict) -}}
{{ $img.repository }}:{{ $img.tag | default $root.Chart.AppVersion }}
{{- end -}}

{{- /* Key in the Secret that holds a service's database URL: DATABASE_URL_<NAME>. */ -}}
{{- define "lab.databaseKey" -}}
{{- printf "DATABASE_URL_%s" (. | upper | replace "-" "_") -}}
{{- end -}}

{{- /* An env var read from the chart's Secret; the argument is (list $root $envName $key $optional). */ -}}
{{- define "lab.secretEnv" -}}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ (index . 0).Values.secrets.name }}
      key: {{ index . 2 }}
      {{- if index . 3 }}
      optional: true
      {{- end }}
{{- end -}}
