package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
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
}

// contentHash frames every entry as a tag byte, then the big-endian length and bytes
// of the key and of the value, in key order: the same digest cbop writes.
func contentHash(data map[string]string, binaryData map[string][]byte) string {
	h := sha256.New()
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
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
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
	name := configMapName(&bundle)
	hash := contentHash(bundle.Spec.Data, bundle.Spec.BinaryData)
	cond := metav1.Condition{
		Type:               conditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             reasonSynced,
		ObservedGeneration: bundle.Generation,
		Message: fmt.Sprintf("ConfigMap %s matches the spec (%d keys, %s)",
			name, len(bundle.Spec.Data)+len(bundle.Spec.BinaryData), hash),
	}
	if bundle.Spec.Suspend {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionUnknown, reasonSuspended, "suspended"
	} else if err := r.syncConfigMap(ctx, &bundle, name, hash); err != nil {
		if !apierrors.IsAlreadyExists(err) && err != errNotOwned {
			return ctrl.Result{}, err
		}
		cond.Status, cond.Reason = metav1.ConditionFalse, reasonConflict
		cond.Message = fmt.Sprintf(errConflictFormat, name)
	}
	return ctrl.Result{}, r.writeStatus(ctx, &bundle, cond, name, hash)
}

type notOwnedError struct{}

func (notOwnedError) Error() string { return "ConfigMap not controlled by the bundle" }

var errNotOwned error = notOwnedError{}

func (r *BundleReconciler) syncConfigMap(ctx context.Context, b *ConfigBundle, name, hash string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, cm, func() error {
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
		cm.Data = copyStrings(b.Spec.Data)
		cm.BinaryData = nil
		if len(b.Spec.BinaryData) > 0 {
			cm.BinaryData = make(map[string][]byte, len(b.Spec.BinaryData))
			for k, v := range b.Spec.BinaryData {
				cm.BinaryData[k] = append([]byte(nil), v...)
			}
		}
		return controllerutil.SetControllerReference(b, cm, r.Scheme)
	})
	return err
}

func (r *BundleReconciler) writeStatus(ctx context.Context, b *ConfigBundle, cond metav1.Condition, name, hash string) error {
	before := b.Status.DeepCopyStatus()
	b.Status.ObservedGeneration = b.Generation
	b.Status.ConfigMapName = name
	b.Status.ContentHash = hash
	b.Status.KeyCount = len(b.Spec.Data) + len(b.Spec.BinaryData)
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

// SetupWithManager watches bundles and the ConfigMaps they control.
func (r *BundleReconciler) SetupWithManager(mgr ctrl.Manager, workers int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&ConfigBundle{}).
		Owns(&corev1.ConfigMap{}).
		WithOptions(controllerOptions(workers)).
		Complete(r)
}
