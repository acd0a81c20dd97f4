{{- define "noderotation.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "noderotation.fullname" -}}
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

{{- define "noderotation.selectorLabels" -}}
app.kubernetes.io/name: {{ include "noderotation.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "noderotation.labels" -}}
{{ include "noderotation.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "noderotation.serviceAccountName" -}}
{{- default (include "noderotation.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The published documentation of this chart's release: its repository (`home`) at tag v<appVersion>. */}}
{{- define "noderotation.releaseDocs" -}}
{{- printf "%s/blob/v%s" .Chart.Home .Chart.AppVersion -}}
{{- end -}}

{{- define "noderotation.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* "true" when the EKS Auto Mode placement applies: eksAutoMode true, or auto and the cluster
serves Auto Mode's NodeClass API. */}}
{{- define "noderotation.eksAutoMode" -}}
{{- $mode := .Values.eksAutoMode | toString -}}
{{- if or (eq $mode "true") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "eks.amazonaws.com/v1/NodeClass")) -}}
true
{{- end -}}
{{- end -}}

{{/* Where the operator and its uninstall hook may run: the same placement for both. On EKS Auto
Mode no node is outside a NodePool, so a required `karpenter.sh/nodepool DoesNotExist` (the
chart's default) becomes `In [system]`, Auto Mode's built-in pool, and empty tolerations become
its CriticalAddonsOnly taint's; every other term and toleration you set is kept. */}}
{{- define "noderotation.placement" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- $tolerations := .Values.tolerations }}
{{- if include "noderotation.eksAutoMode" . }}
{{- with $affinity.nodeAffinity }}
{{- with .requiredDuringSchedulingIgnoredDuringExecution }}
{{- $terms := list }}
{{- range .nodeSelectorTerms }}
{{- $term := deepCopy . }}
{{- if hasKey $term "matchExpressions" }}
{{- $exprs := list }}
{{- range $term.matchExpressions }}
{{- if and (eq .key "karpenter.sh/nodepool") (eq .operator "DoesNotExist") }}
{{- $exprs = append $exprs (dict "key" "karpenter.sh/nodepool" "operator" "In" "values" (list "system")) }}
{{- else }}
{{- $exprs = append $exprs . }}
{{- end }}
{{- end }}
{{- $_ := set $term "matchExpressions" $exprs }}
{{- end }}
{{- $terms = append $terms $term }}
{{- end }}
{{- $_ := set . "nodeSelectorTerms" $terms }}
{{- end }}
{{- end }}
{{- if not $tolerations }}
{{- $tolerations = list (dict "key" "CriticalAddonsOnly" "operator" "Exists") }}
{{- end }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
