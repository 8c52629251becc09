package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The part of cbop's sources contract (docs/sources.md) this peer implements for S10:
// spec.sources[].configMap (name, namespace, optional), flat key merge (a later source
// wins a key, spec.data last), the source label, the share-with annotation, and
// status.sources with each source's contentHash. No items, no structured merge.
const (
	labelSource         = "cbop.dev/source"
	annotationShareWith = "cbop.dev/share-with"
	// SourceIndex is the field index from "namespace/name" of a source to the bundles
	// that name it in spec.sources.
	SourceIndex        = "spec.sources.configMap"
	reasonNotFound     = "SourceNotFound"
	reasonNotShared    = "SourceNotShared"
	reasonInvalidSrc   = "InvalidSource"
	keySourceSpecLayer = "spec"
)

// sourceKeys returns "namespace/name" of every source the bundle names, in order.
func sourceKeys(b *ConfigBundle) []string {
	var out []string
	for _, src := range b.Spec.Sources {
		ref, prefix := src.ConfigMap, ""
		if src.Secret != nil {
			ref, prefix = src.Secret, secretKeyPrefix
		}
		if ref == nil || ref.Name == "" {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = b.Namespace
		}
		out = append(out, prefix+ns+"/"+ref.Name)
	}
	return out
}

// indexSources is the IndexerFunc of SourceIndex.
func indexSources(obj client.Object) []string {
	b, ok := obj.(*ConfigBundle)
	if !ok {
		return nil
	}
	return sourceKeys(b)
}

// readersOf maps a source ConfigMap's event to its readers' reconcile requests, through
// the index (no request to the API server).
func (r *BundleReconciler) readersOf(ctx context.Context, cm *corev1.ConfigMap) []reconcile.Request {
	return r.readersByKey(ctx, cm.Namespace+"/"+cm.Name)
}

// readersByKey lists the bundles the SourceIndex maps key to, as reconcile requests.
func (r *BundleReconciler) readersByKey(ctx context.Context, key string) []reconcile.Request {
	var bundles ConfigBundleList
	if err := r.List(ctx, &bundles, client.MatchingFields{SourceIndex: key}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(bundles.Items))
	for i := range bundles.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{
			Namespace: bundles.Items[i].Namespace, Name: bundles.Items[i].Name,
		}})
	}
	return out
}

// sharedWith reports whether a source's share-with annotation names ns (or "*").
func sharedWith(cm client.Object, ns string) bool {
	if cm.GetNamespace() == ns {
		return true
	}
	for _, item := range strings.Split(cm.GetAnnotations()[annotationShareWith], ",") {
		item = strings.TrimSpace(item)
		if item == "*" || item == ns {
			return true
		}
	}
	return false
}

// sourceError is a source that cannot be read: the bundle is Ready=False with reason.
type sourceError struct {
	reason, message string
}

func (e *sourceError) Error() string { return e.message }

// composed is a bundle's content with its sources laid under spec.data.
type composed struct {
	data       map[string]string
	binaryData map[string][]byte
	sources    []SourceStatus
	keySources map[string]string
}

// compose reads the bundle's sources from the label-selected source cache and merges
// them under spec.data: for every key the last layer that has it wins.
func (r *BundleReconciler) compose(ctx context.Context, b *ConfigBundle) (*composed, *sourceError) {
	out := &composed{data: map[string]string{}, binaryData: map[string][]byte{}}
	if len(b.Spec.Sources) > 0 {
		out.keySources = map[string]string{}
	}
	for _, src := range b.Spec.Sources {
		if src.Secret != nil {
			if err := r.composeSecret(ctx, b, src.Secret, out); err != nil {
				return nil, err
			}
			continue
		}
		ref := src.ConfigMap
		if ref == nil {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = b.Namespace
		}
		var cm corev1.ConfigMap
		err := r.Sources.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &cm)
		if err != nil {
			if client.IgnoreNotFound(err) != nil {
				return nil, &sourceError{reasonInvalidSrc, err.Error()}
			}
			if ref.Optional {
				continue
			}
			return nil, &sourceError{reasonNotFound, fmt.Sprintf(
				"source ConfigMap %s/%s not found (it needs the label %s: \"true\")", ns, ref.Name, labelSource)}
		}
		if !sharedWith(&cm, b.Namespace) {
			return nil, &sourceError{reasonNotShared, fmt.Sprintf(
				"source ConfigMap %s/%s is not shared with namespace %s (annotation %s)",
				ns, ref.Name, b.Namespace, annotationShareWith)}
		}
		if cm.Labels[labelManagedBy] == managedByValue {
			return nil, &sourceError{reasonInvalidSrc, fmt.Sprintf(
				"source ConfigMap %s/%s is managed by cbop", ns, ref.Name)}
		}
		name := ns + "/" + ref.Name
		for k, v := range cm.Data {
			out.data[k] = v
			delete(out.binaryData, k)
			out.keySources[k] = name
		}
		for k, v := range cm.BinaryData {
			out.binaryData[k] = v
			delete(out.data, k)
			out.keySources[k] = name
		}
		out.sources = append(out.sources, SourceStatus{
			Namespace: ns, Name: ref.Name, ContentHash: contentHash(cm.Data, cm.BinaryData),
		})
	}
	for k, v := range b.Spec.Data {
		out.data[k] = v
		delete(out.binaryData, k)
		if out.keySources != nil {
			out.keySources[k] = keySourceSpecLayer
		}
	}
	for k, v := range b.Spec.BinaryData {
		out.binaryData[k] = v
		delete(out.data, k)
		if out.keySources != nil {
			out.keySources[k] = keySourceSpecLayer
		}
	}
	if len(out.binaryData) == 0 {
		out.binaryData = nil
	}
	return out, nil
}

// statusCanWait is cbop's "ConfigMaps first, statuses after" (docs/sources.md): new
// content within a generation whose status already says Ready leaves the status write to
// the reconcile the ConfigMap's own watch event brings (Owns), behind the other readers.
func statusCanWait(b *ConfigBundle, hash string) bool {
	st := b.Status
	if st.ContentHash == "" || st.ContentHash == hash || st.ObservedGeneration != b.Generation {
		return false
	}
	ready := meta.FindStatusCondition(st.Conditions, conditionReady)
	return ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == st.ObservedGeneration
}
