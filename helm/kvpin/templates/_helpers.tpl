{{- define "kvpin.name" -}}kvpin{{- end -}}

{{- define "kvpin.fullname" -}}
{{- if contains "kvpin" .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-kvpin" .Release.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "kvpin.labels" -}}
app.kubernetes.io/name: kvpin
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kvpin.selector" -}}
app.kubernetes.io/name: kvpin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kvpin.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "kvpin.namespaceArgs" -}}
{{- if . }}{{ range . }}
- -n
- {{ . | quote }}
{{- end }}{{ else }}
- --all-namespaces
{{- end }}
{{- end -}}

{{- define "kvpin.podSpecCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
