package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the ConfigBundle API (manifests/crd/cbop.dev_configbundles.yaml): the
// storage version, which cbop reads and writes too.
var GroupVersion = schema.GroupVersion{Group: "cbop.dev", Version: "v1beta1"}

var schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// ConfigBundleSpec is the part of the spec this peer acts on.
type ConfigBundleSpec struct {
	ConfigMapName string            `json:"configMapName,omitempty"`
	Data          map[string]string `json:"data,omitempty"`
	BinaryData    map[string][]byte `json:"binaryData,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
	Immutable     bool              `json:"immutable,omitempty"`
	Suspend       bool              `json:"suspend,omitempty"`
	Sources       []BundleSource    `json:"sources,omitempty"`
	Target        *BundleTarget     `json:"target,omitempty"`
}

// BundleTarget is spec.target: a Secret target (kind Secret, with --secrets) or the
// default ConfigMap.
type BundleTarget struct {
	Kind string `json:"kind,omitempty"`
	Name string `json:"name,omitempty"`
	Type string `json:"type,omitempty"`
}

// BundleSource is one entry of spec.sources (configMap or secret, without items or merge).
type BundleSource struct {
	ConfigMap *ConfigMapSource `json:"configMap,omitempty"`
	Secret    *ConfigMapSource `json:"secret,omitempty"`
}

// ConfigMapSource names a labelled source ConfigMap.
type ConfigMapSource struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Optional  bool   `json:"optional,omitempty"`
}

// SourceStatus is one entry of status.sources: what was read.
type SourceStatus struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	ContentHash string `json:"contentHash"`
}

// ConfigBundleStatus mirrors cbop's status fields.
type ConfigBundleStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	ConfigMapName      string             `json:"configMapName,omitempty"`
	SecretName         string             `json:"secretName,omitempty"`
	ContentHash        string             `json:"contentHash,omitempty"`
	KeyCount           int                `json:"keyCount,omitempty"`
	Sources            []SourceStatus     `json:"sources,omitempty"`
	KeySources         map[string]string  `json:"keySources,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// ConfigBundle declares one ConfigMap.
type ConfigBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfigBundleSpec   `json:"spec,omitempty"`
	Status ConfigBundleStatus `json:"status,omitempty"`
}

// ConfigBundleList is a list of ConfigBundles.
type ConfigBundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ConfigBundle `json:"items"`
}

func init() {
	schemeBuilder.Register(&ConfigBundle{}, &ConfigBundleList{})
}

func copyStrings(in map[string]string) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// DeepCopyInto copies the spec (what controller-gen would generate).
func (in *ConfigBundleSpec) DeepCopyInto(out *ConfigBundleSpec) {
	*out = *in
	out.Data = copyStrings(in.Data)
	out.Labels = copyStrings(in.Labels)
	out.Annotations = copyStrings(in.Annotations)
	if in.BinaryData != nil {
		out.BinaryData = make(map[string][]byte, len(in.BinaryData))
		for k, v := range in.BinaryData {
			out.BinaryData[k] = append([]byte(nil), v...)
		}
	}
	if in.Sources != nil {
		out.Sources = make([]BundleSource, len(in.Sources))
		for i, src := range in.Sources {
			if src.ConfigMap != nil {
				ref := *src.ConfigMap
				out.Sources[i].ConfigMap = &ref
			}
			if src.Secret != nil {
				ref := *src.Secret
				out.Sources[i].Secret = &ref
			}
		}
	}
	if in.Target != nil {
		target := *in.Target
		out.Target = &target
	}
}

// DeepCopyInto copies the status.
func (in *ConfigBundleStatus) DeepCopyInto(out *ConfigBundleStatus) {
	*out = *in
	out.Sources = append([]SourceStatus(nil), in.Sources...)
	out.KeySources = copyStrings(in.KeySources)
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopyInto copies the whole object.
func (in *ConfigBundle) DeepCopyInto(out *ConfigBundle) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy.
func (in *ConfigBundle) DeepCopy() *ConfigBundle {
	if in == nil {
		return nil
	}
	out := new(ConfigBundle)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ConfigBundle) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the list.
func (in *ConfigBundleList) DeepCopyInto(out *ConfigBundleList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]ConfigBundle, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *ConfigBundleList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(ConfigBundleList)
	in.DeepCopyInto(out)
	return out
}

// ClusterConfigBundleSpec is the part of a ClusterConfigBundle's spec this peer acts on
// (manifests/crd/cbop.dev_clusterconfigbundles.yaml): which namespaces, and what each gets.
type ClusterConfigBundleSpec struct {
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	Template          ConfigBundleSpec     `json:"template"`
}

// NamespaceCounts counts the selected namespaces.
type NamespaceCounts struct {
	Selected int `json:"selected"`
	Ready    int `json:"ready"`
	Failed   int `json:"failed"`
}

// FailedNamespace is a namespace that cannot be served, and why.
type FailedNamespace struct {
	Namespace string `json:"namespace"`
	Reason    string `json:"reason"`
	Message   string `json:"message,omitempty"`
}

// ClusterConfigBundleStatus mirrors cbop's status fields.
type ClusterConfigBundleStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Namespaces         NamespaceCounts    `json:"namespaces"`
	FailedNamespaces   []FailedNamespace  `json:"failedNamespaces,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// ClusterConfigBundle declares one ConfigMap in every selected namespace (cluster-scoped).
type ClusterConfigBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterConfigBundleSpec   `json:"spec,omitempty"`
	Status ClusterConfigBundleStatus `json:"status,omitempty"`
}

// ClusterConfigBundleList is a list of ClusterConfigBundles.
type ClusterConfigBundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterConfigBundle `json:"items"`
}

func init() {
	schemeBuilder.Register(&ClusterConfigBundle{}, &ClusterConfigBundleList{})
}

// DeepCopyInto copies the status.
func (in *ClusterConfigBundleStatus) DeepCopyInto(out *ClusterConfigBundleStatus) {
	*out = *in
	out.FailedNamespaces = append([]FailedNamespace(nil), in.FailedNamespaces...)
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopyInto copies the whole object.
func (in *ClusterConfigBundle) DeepCopyInto(out *ClusterConfigBundle) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.NamespaceSelector.DeepCopyInto(&out.Spec.NamespaceSelector)
	in.Spec.Template.DeepCopyInto(&out.Spec.Template)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy.
func (in *ClusterConfigBundle) DeepCopy() *ClusterConfigBundle {
	if in == nil {
		return nil
	}
	out := new(ClusterConfigBundle)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *ClusterConfigBundle) DeepCopyObject() runtime.Object { return in.DeepCopy() }

// DeepCopyInto copies the list.
func (in *ClusterConfigBundleList) DeepCopyInto(out *ClusterConfigBundleList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]ClusterConfigBundle, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *ClusterConfigBundleList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(ClusterConfigBundleList)
	in.DeepCopyInto(out)
	return out
}
