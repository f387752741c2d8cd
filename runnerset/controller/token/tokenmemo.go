package token

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readSecrets is a client.Reader for token Secrets that reads each Secret
// from the API server once per version: it remembers the Secret it read,
// and while the metadata cache (every Secret's metadata is watched, so that
// a token's change brings its RunnerSets back) shows the resourceVersion it
// read, it hands out that copy instead of asking again. A new RunnerSet's two
// passes read its token once instead of twice: for a thousand new
// RunnerSets, a thousand requests fewer on the client's rate limit for
// Secrets. A changed, replaced or deleted Secret has another
// resourceVersion, or none, and is read again. Anything but a Secret goes to
// the API server.
type readSecrets struct {
	api   client.Reader
	cache client.Reader

	mu   sync.Mutex
	read map[client.ObjectKey]*corev1.Secret
}

func newReadSecrets(api, cache client.Reader) *readSecrets {
	return &readSecrets{api: api, cache: cache, read: map[client.ObjectKey]*corev1.Secret{}}
}

// Get implements client.Reader.
func (r *readSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return r.api.Get(ctx, key, obj, opts...)
	}
	if seen := r.seen(ctx, key); seen != nil {
		seen.DeepCopyInto(sec)
		return nil
	}
	if err := r.api.Get(ctx, key, sec, opts...); err != nil {
		return err
	}
	r.mu.Lock()
	r.read[key] = sec.DeepCopy()
	r.mu.Unlock()
	return nil
}

// seen is the Secret last read under key when the metadata cache shows it
// unchanged since, and nil otherwise (then it is forgotten).
func (r *readSecrets) seen(ctx context.Context, key client.ObjectKey) *corev1.Secret {
	r.mu.Lock()
	sec := r.read[key]
	r.mu.Unlock()
	if sec == nil {
		return nil
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.cache.Get(ctx, key, meta); err != nil || meta.ResourceVersion != sec.ResourceVersion || meta.UID != sec.UID {
		r.mu.Lock()
		if r.read[key] == sec {
			delete(r.read, key)
		}
		r.mu.Unlock()
		return nil
	}
	return sec
}

// List implements client.Reader; token Secrets are only ever read by name.
func (r *readSecrets) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.api.List(ctx, list, opts...)
}
