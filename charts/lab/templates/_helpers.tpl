{{- /* The chart's name, or nameOverride. */ -}}
{{- define "lab.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /*
Prefix of every resource name: fullnameOverride, else the release name alone when
it already contains the chart's name (release `lab` gives `lab-notebook`, not
`lab-lab-notebook`), else `<release>-<name>`; at most 63 characters.
*/ -}}
{{- define "lab.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "lab.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
Name of a resource of the release: `<fullname>-<tail>` (list $root "notebook-grpc").
The fullname is shortened, never the tail, so the name stays a 63-character DNS
label and the names of one component's resources stay apart.
*/ -}}
{{- define "lab.resourceName" -}}
{{- $tail := printf "-%s" (index . 1) -}}
{{- $head := include "lab.fullname" (index . 0) | trunc (int (sub 63 (len $tail))) | trimSuffix "-" -}}
{{- printf "%s%s" $head $tail -}}
{{- end -}}

{{- /* The headless Service of a gRPC service, which clients resolve to its ready pods: (list $root $name). */ -}}
{{- define "lab.headlessName" -}}
{{- include "lab.resourceName" (list (index . 0) (printf "%s-grpc" (index . 1))) -}}
{{- end -}}

{{- /*
The gRPC target of a service, (list $root $name): every ready pod behind its
headless Service, `dns:///<headless>.<namespace>.svc.<clusterDomain>:<port>`.
Clients balance calls over these addresses (round_robin) and re-resolve the name
when a connection closes.
*/ -}}
{{- define "lab.grpcTarget" -}}
{{- $root := index . 0 -}}{{- $name := index . 1 -}}
{{- $svc := index $root.Values.services $name -}}
{{- printf "dns:///%s.%s.svc.%s:%v" (include "lab.headlessName" .) $root.Release.Namespace $root.Values.clusterDomain $svc.port -}}
{{- end -}}

{{- /* `<NAME>_ADDR`: the variable a service's address is read from. */ -}}
{{- define "lab.addrKey" -}}
{{- printf "%s_ADDR" (. | upper | replace "-" "_") -}}
{{- end -}}

{{- /* In-cluster host name of an ordinary (ClusterIP) Service: (list $root $name). */ -}}
{{- define "lab.serviceHost" -}}
{{- $root := index . 0 -}}
{{- printf "%s.%s.svc.%s" (include "lab.resourceName" .) $root.Release.Namespace $root.Values.clusterDomain -}}
{{- end -}}

{{- define "lab.labels" -}}
app.kubernetes.io/name: {{ include "lab.name" . }}
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

{{- /*
An env var read from a Secret; the argument is (list $root $envName $key $optional).
The key is looked up in the chart's Secret (secrets.name) unless secrets.refs names
another Secret and key for it (e.g. one an operator or external-secrets writes).
*/ -}}
{{- define "lab.secretEnv" -}}
{{- $root := index . 0 -}}{{- $key := index . 2 -}}
{{- $secret := $root.Values.secrets.name -}}
{{- with get ($root.Values.secrets.refs | default dict) $key }}{{ $secret = .name }}{{ $key = .key }}{{ end -}}
- name: {{ index . 1 }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
      {{- if index . 3 }}
      optional: true
      {{- end }}
{{- end -}}
