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

{{- /*
The image of a service, (list $root $svc): the chart-wide image, overridden field
by field by services.<name>.image; `<registry>/<repository>:<tag>[@<digest>]`,
global.imageRegistry in place of the registry.
*/ -}}
{{- define "lab.image" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- $img := mergeOverwrite (deepCopy $root.Values.image) ((get $svc "image") | default dict) -}}
{{- $registry := (dig "imageRegistry" "" ($root.Values.global | default dict)) | default $img.registry -}}
{{- $ref := printf "%s:%s" $img.repository (toString ($img.tag | default $root.Chart.AppVersion)) -}}
{{- with $registry }}{{ $ref = printf "%s/%s" (trimSuffix "/" .) $ref }}{{ end -}}
{{- with $img.digest }}{{ $ref = printf "%s@%s" $ref . }}{{ end -}}
{{ $ref }}
{{- end -}}

{{- /* imagePullSecrets of every pod: global.imagePullSecrets, then the chart's own. */ -}}
{{- define "lab.pullSecrets" -}}
{{- $all := concat ((dig "imagePullSecrets" list (.Values.global | default dict)) | default list) (.Values.imagePullSecrets | default list) | uniq -}}
{{- with $all }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- /* The ServiceAccount the pods run as. */ -}}
{{- define "lab.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "lab.resourceName" (list . "sa")) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- /*
A pod setting of a component, (list $root $svc "key"): services.<name>.<key> when
given, else the chart-wide value.
*/ -}}
{{- define "lab.podSetting" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}{{- $key := index . 2 -}}
{{- if hasKey $svc $key -}}{{- toYaml (get $svc $key) -}}{{- else -}}{{- toYaml (get $root.Values $key) -}}{{- end -}}
{{- end -}}

{{- /*
The pod spec fields every pod of a component shares, (list $root $svc $name):
service account, pull secrets, scheduling. $name empty: the chart-wide values
only (the helm test Pod).
*/ -}}
{{- define "lab.podSpec" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}{{- $name := index . 2 -}}
serviceAccountName: {{ include "lab.serviceAccountName" $root }}
automountServiceAccountToken: {{ $root.Values.serviceAccount.automountToken }}
{{- include "lab.pullSecrets" $root }}
{{- with include "lab.podSetting" (list $root $svc "nodeSelector") | fromYaml }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "lab.podSetting" (list $root $svc "tolerations") | fromYamlArray }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with include "lab.podSetting" (list $root $svc "affinity") | fromYaml }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (hasKey $svc "priorityClassName" | ternary (get $svc "priorityClassName") $root.Values.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
{{- if $name }}
{{- $spread := list }}
{{- range include "lab.podSetting" (list $root $svc "topologySpreadConstraints") | fromYamlArray }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "lab.selector" (list $root $name) | fromYaml)) }}
{{- end }}
{{- $spread = append $spread $c }}
{{- end }}
{{- with $spread }}
topologySpreadConstraints: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{- /*
Pod labels and annotations of a component, (list $root $svc $kind): podLabels /
podAnnotations, merged with services.<name>.podLabels / podAnnotations; the
chart's own labels win over them.
*/ -}}
{{- define "lab.podExtra" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}{{- $kind := index . 2 -}}
{{- toYaml (merge (deepCopy ((get $svc $kind) | default dict)) (deepCopy ((get $root.Values $kind) | default dict))) -}}
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

{{- /*
A probe of a component's container, (list $root $svc "startup"|"liveness"|"readiness"):
the timing of services.<name>.probes.<which>, and what it checks on the ports the
process serves: startup and liveness the API (the gateway's GET /v1/health on
PORT, a gRPC service's grpc.health.v1 on GRPC_PORT), readiness GET /readyz on the
operations port (METRICS_PORT, always served). A handler given in the values is
kept as it is.
*/ -}}
{{- define "lab.probe" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}{{- $which := index . 2 -}}
{{- $p := deepCopy ((get ($svc.probes | default dict) $which) | default dict) -}}
{{- if not (or (hasKey $p "httpGet") (hasKey $p "grpc") (hasKey $p "tcpSocket") (hasKey $p "exec")) -}}
{{- if eq $which "readiness" -}}
{{- $_ := set $p "httpGet" (dict "path" "/readyz" "port" (int $root.Values.metrics.port)) -}}
{{- else if eq $svc.kind "http" -}}
{{- $_ := set $p "httpGet" (dict "path" "/v1/health" "port" (int $svc.port)) -}}
{{- else -}}
{{- $_ := set $p "grpc" (dict "port" (int $svc.port)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}

{{- /* The most pods of a component at once: HPA maxReplicas or replicas, plus a rollout's surge: (list $root $svc). */ -}}
{{- define "lab.maxPods" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- $max := ternary $svc.autoscaling.maxReplicas $svc.replicas $svc.autoscaling.enabled | int -}}
{{- $surge := (get (include "lab.strategy" . | fromYaml) "maxSurge") -}}
{{- $s := 0 -}}
{{- if kindIs "string" $surge -}}
{{- $pct := trimSuffix "%" $surge | int -}}
{{- $s = div (add (mul $max $pct) 99) 100 -}}
{{- else -}}
{{- $s = int $surge -}}
{{- end -}}
{{- add $max $s -}}
{{- end -}}

{{- /* The rolling update of a component, (list $root $svc): strategy, then services.<name>.strategy. */ -}}
{{- define "lab.strategy" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- toYaml (mergeOverwrite (deepCopy $root.Values.strategy) ((get $svc "strategy") | default dict)) -}}
{{- end -}}

{{- /* DATABASE_POOL_SIZE of a component, (list $root $svc). */ -}}
{{- define "lab.poolSize" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}
{{- (get $svc "databasePoolSize") | default $root.Values.database.poolSize | int -}}
{{- end -}}

{{- /*
The connection budget: fails the render when the most connections the release
opens exceed database.maxConnections, with the arithmetic.
*/ -}}
{{- define "lab.checkConnectionBudget" -}}
{{- $root := . -}}
{{- $total := 0 -}}
{{- $terms := list -}}
{{- range $name, $svc := .Values.services -}}
{{- if and $svc.enabled $svc.database -}}
{{- $pods := include "lab.maxPods" (list $root $svc) | int -}}
{{- $pool := include "lab.poolSize" (list $root $svc) | int -}}
{{- $total = add $total (mul $pods $pool) -}}
{{- $terms = append $terms (printf "%s %dx%d" $name $pods $pool) -}}
{{- end -}}
{{- end -}}
{{- $jobs := 0 -}}
{{- if .Values.migrations.enabled -}}
{{- range $name, $svc := .Values.services -}}
{{- if and $svc.enabled $svc.database $svc.migrate }}{{ $jobs = add1 $jobs }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $total = add $total $jobs -}}
{{- if gt $total (int .Values.database.maxConnections) -}}
{{- fail (printf "database connections: the release may open %d, over database.maxConnections (%d): %s (pods at most, with the rollout's surge, x DATABASE_POOL_SIZE) + %d migration Jobs x 1 = %d. Lower services.<name>.databasePoolSize or database.poolSize, the replicas, or put a pooler in front and raise database.maxConnections (values-production.yaml)." $total (int .Values.database.maxConnections) (join " + " $terms) $jobs $total) -}}
{{- end -}}
{{- end -}}

{{- /*
Fails when terminationGracePeriodSeconds does not cover a stop: preStop sleep +
LAB_SHUTDOWN_DRAIN_MS (8 s) + calls finishing (10 s) + LAB_OUTBOX_STOP_FLUSH_MS
(5 s), read from config or the component's env: (list $root $svc $name).
*/ -}}
{{- define "lab.checkGrace" -}}
{{- $root := index . 0 -}}{{- $svc := index . 1 -}}{{- $name := index . 2 -}}
{{- $env := merge (deepCopy ($svc.env | default dict)) (deepCopy $root.Values.config) -}}
{{- $drain := (get $env "LAB_SHUTDOWN_DRAIN_MS") | default 8000 | int -}}
{{- $flush := (get $env "LAB_OUTBOX_STOP_FLUSH_MS") | default 5000 | int -}}
{{- $need := add (int $root.Values.lifecycle.preStopSleepSeconds) (div (add $drain $flush 10000 999) 1000) -}}
{{- if le (int $root.Values.terminationGracePeriodSeconds) $need -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be longer than a stop of %s: preStop %d s + drain %d ms + calls 10000 ms + outbox flush %d ms = %d s" (int $root.Values.terminationGracePeriodSeconds) $name (int $root.Values.lifecycle.preStopSleepSeconds) $drain $flush $need) -}}
{{- end -}}
{{- end -}}
