package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

const (
	labelManagedBy    = "app.kubernetes.io/managed-by"
	labelBundle       = "cbop.dev/bundle"
	annotationHash    = "cbop.dev/content-hash"
	conditionReady    = "Ready"
	reasonSynced      = "Synced"
	reasonConflict    = "ConfigMapConflict"
	reasonSuspended   = "Suspended"
	managedByValue    = "cbop"
	errConflictFormat = "ConfigMap %s exists and is not controlled by this bundle"
)

// BundleReconciler keeps each bundle's ConfigMap equal to its spec.
type BundleReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	// Sources reads the label-selected source cache (nil: no bundle's source is found).
	Sources client.Reader
	// Secrets serves Secret targets and sources (--secrets); DigestKey keys their digest.
	Secrets   bool
	DigestKey []byte
}

// contentHash frames every entry as a tag byte, then the big-endian length and bytes
// of the key and of the value, in key order: the same digest cbop writes.
func contentHash(data map[string]string, binaryData map[string][]byte) string {
	return "sha256:" + hex.EncodeToString(frameDigest(sha256.New(), data, binaryData))
}

// frameDigest writes contentHash's framing of the content into h and returns its sum.
func frameDigest(h hash.Hash, data map[string]string, binaryData map[string][]byte) []byte {
	var size [8]byte
	frame := func(tag byte, key string, value []byte) {
		h.Write([]byte{tag})
		binary.BigEndian.PutUint64(size[:], uint64(len(key)))
		h.Write(size[:])
		h.Write([]byte(key))
		binary.BigEndian.PutUint64(size[:], uint64(len(value)))
		h.Write(size[:])
		h.Write(value)
	}
	for _, k := range sortedKeys(data) {
		frame('d', k, []byte(data[k]))
	}
	keys := make([]string, 0, len(binaryData))
	for k := range binaryData {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		frame('b', k, binaryData[k])
	}
	return h.Sum(nil)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func configMapName(b *ConfigBundle) string {
	if b.Spec.ConfigMapName != "" {
		return b.Spec.ConfigMapName
	}
	return b.Name
}

// Reconcile brings one bundle's ConfigMap in line and reports it in status.
func (r *BundleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bundle ConfigBundle
	if err := r.Get(ctx, req.NamespacedName, &bundle); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !bundle.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	if isSecretTarget(&bundle) {
		return r.reconcileSecret(ctx, &bundle)
	}
	name := configMapName(&bundle)
	content := &composed{data: bundle.Spec.Data, binaryData: bundle.Spec.BinaryData}
	if len(bundle.Spec.Sources) > 0 {
		var failed *sourceError
		if r.Sources == nil {
			failed = &sourceError{reasonNotFound, "sources are not watched (run with --sources)"}
		} else {
			content, failed = r.compose(ctx, &bundle)
		}
		if failed != nil {
			// Nothing is written: the ConfigMap keeps its last good content.
			cond := metav1.Condition{
				Type: conditionReady, Status: metav1.ConditionFalse, Reason: failed.reason,
				ObservedGeneration: bundle.Generation, Message: failed.message,
			}
			return ctrl.Result{}, r.writeStatus(ctx, &bundle, cond, name, bundle.Status.ContentHash, nil)
		}
	}
	hash := contentHash(content.data, content.binaryData)
	cond := metav1.Condition{
		Type:               conditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             reasonSynced,
		ObservedGeneration: bundle.Generation,
		Message: fmt.Sprintf("ConfigMap %s matches the spec (%d keys, %s)",
			name, len(content.data)+len(content.binaryData), hash),
	}
	if bundle.Spec.Suspend {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, reasonSuspended, "suspended"
	} else {
		op, err := r.syncConfigMap(ctx, &bundle, name, hash, content)
		if err != nil {
			if !apierrors.IsAlreadyExists(err) && err != errNotOwned {
				return ctrl.Result{}, err
			}
			cond.Status, cond.Reason = metav1.ConditionFalse, reasonConflict
			cond.Message = fmt.Sprintf(errConflictFormat, name)
		} else if op == controllerutil.OperationResultUpdated && statusCanWait(&bundle, hash) {
			// The ConfigMap's watch event (Owns) brings the bundle back for its status.
			return ctrl.Result{}, nil
		}
	}
	return ctrl.Result{}, r.writeStatus(ctx, &bundle, cond, name, hash, content)
}

type notOwnedError struct{}

func (notOwnedError) Error() string { return "ConfigMap not controlled by the bundle" }

var errNotOwned error = notOwnedError{}

func (r *BundleReconciler) syncConfigMap(ctx context.Context, b *ConfigBundle, name, hash string, content *composed) (controllerutil.OperationResult, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace}}
	return controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
		if !cm.CreationTimestamp.IsZero() && !metav1.IsControlledBy(cm, b) {
			return errNotOwned
		}
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		for k, v := range b.Spec.Labels {
			cm.Labels[k] = v
		}
		cm.Labels[labelManagedBy] = managedByValue
		cm.Labels[labelBundle] = b.Name
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		for k, v := range b.Spec.Annotations {
			cm.Annotations[k] = v
		}
		cm.Annotations[annotationHash] = hash
		cm.Data = copyStrings(content.data)
		cm.BinaryData = nil
		if len(content.binaryData) > 0 {
			cm.BinaryData = make(map[string][]byte, len(content.binaryData))
			for k, v := range content.binaryData {
				cm.BinaryData[k] = append([]byte(nil), v...)
			}
		}
		return controllerutil.SetControllerReference(b, cm, r.Scheme)
	})
}

// writeStatus writes the status when it changes; content nil keeps the content fields
// (a failing source leaves the ConfigMap, and what status says of it, as they were).
func (r *BundleReconciler) writeStatus(ctx context.Context, b *ConfigBundle, cond metav1.Condition, name, hash string, content *composed) error {
	before := b.Status.DeepCopyStatus()
	b.Status.ObservedGeneration = b.Generation
	if isSecretTarget(b) {
		b.Status.SecretName = name
	} else {
		b.Status.ConfigMapName = name
	}
	if content != nil {
		b.Status.ContentHash = hash
		b.Status.KeyCount = len(content.data) + len(content.binaryData)
		b.Status.Sources = content.sources
		b.Status.KeySources = content.keySources
	}
	meta.SetStatusCondition(&b.Status.Conditions, cond)
	if equality.Semantic.DeepEqual(before, b.Status) {
		return nil
	}
	return r.Status().Update(ctx, b)
}

// DeepCopyStatus returns a copy of the status for comparison.
func (in *ConfigBundleStatus) DeepCopyStatus() ConfigBundleStatus {
	var out ConfigBundleStatus
	in.DeepCopyInto(&out)
	return out
}

// SetupWithManager watches bundles and the ConfigMaps they control; with sourceCache
// (the label-selected cache of source ConfigMaps), also the sources, mapped to their
// readers through the SourceIndex field index.
func (r *BundleReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, workers int, sourceCache cache.Cache) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&ConfigBundle{}).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controllerOptions(workers))
	if sourceCache != nil {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &ConfigBundle{}, SourceIndex, indexSources); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Kind(sourceCache, &corev1.ConfigMap{},
			handler.TypedEnqueueRequestsFromMapFunc(r.readersOf)))
		if r.Secrets {
			b = b.Owns(&corev1.Secret{}).WatchesRawSource(source.Kind(sourceCache, &corev1.Secret{},
				handler.TypedEnqueueRequestsFromMapFunc(r.readersOfSecret)))
		}
	}
	return b.Complete(r)
}
