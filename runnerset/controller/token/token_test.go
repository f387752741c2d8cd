// The token package alone, with no API server: what a stored token's Secret
// is judged by, when a created runner's token is renewed and checked, and
// that a token Secret is read once per version. The lifecycle against a
// GitLab and an API server is tested through the controller
// (runnerset/controller's gitlab_test.go, tokencheck_test.go).

package token

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/runnerfleet/runnerfleet/runnerset/api/v1alpha1"
)

func storedTokenSet(secret string) *v1alpha1.RunnerSet {
	return &v1alpha1.RunnerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "rs"},
		Spec: v1alpha1.RunnerSetSpec{GitLab: v1alpha1.GitLabSpec{
			TokenSecretRef: &v1alpha1.SecretKeyRef{Name: secret},
		}},
	}
}

func tokenSecret(value string, annotations map[string]string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "runner", Annotations: annotations},
		Data:       map[string][]byte{"token": []byte(value)},
	}
}

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// A stored token GitLab would refuse stops at the token with a reason the
// team can act on, and the message never echoes the value.
func TestAStoredTokenIsJudgedWithoutEchoingIt(t *testing.T) {
	const secretValue = "S3cr3tPart"
	for _, tc := range []struct {
		name        string
		value       string
		annotations map[string]string
		reason      string
	}{
		{"registration token", registrationTokenPrefix + secretValue, nil, v1alpha1.ReasonRegistrationToken},
		{"trailing newline", "glrt-" + secretValue + "\n", nil, v1alpha1.ReasonTokenMalformed},
		{"expiry not RFC 3339", "glrt-" + secretValue, map[string]string{AnnotationTokenExpiresAt: "next year"}, v1alpha1.ReasonTokenMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tokenSecret(tc.value, tc.annotations)).Build()
			_, err := SecretTokens{Reader: c}.Token(context.Background(), storedTokenSet("runner"), "")
			var f *v1alpha1.Failure
			if !errors.As(err, &f) || f.Reason != tc.reason {
				t.Fatalf("got %v, want a Failure with reason %s", err, tc.reason)
			}
			if strings.Contains(f.Message, secretValue) {
				t.Errorf("the message echoes the token: %q", f.Message)
			}
			if !strings.Contains(f.Message, "team/runner") {
				t.Errorf("the message does not name the Secret: %q", f.Message)
			}
		})
	}
}

func TestAStoredTokenCarriesTheExpiryItsSecretStates(t *testing.T) {
	at := time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
	c := fake.NewClientBuilder().WithScheme(scheme(t)).
		WithObjects(tokenSecret("glrt-good_token", map[string]string{AnnotationTokenExpiresAt: at.Format(time.RFC3339)})).Build()
	tok, err := SecretTokens{Reader: c}.Token(context.Background(), storedTokenSet("runner"), "")
	if err != nil {
		t.Fatal(err)
	}
	if !tok.ExpiresAt.Equal(at) || tok.Value != "glrt-good_token" || tok.SecretRef.Name != "runner" || tok.RunnerID != 0 {
		t.Errorf("got %+v", tok)
	}
}

func TestACreatedRunnersTokenIsRenewedTwoThirdsIntoItsLife(t *testing.T) {
	obtained := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := obtained.Add(30 * 24 * time.Hour)
	for _, tc := range []struct {
		name              string
		obtained, expires time.Time
		want              time.Time
	}{
		{"never expires", obtained, time.Time{}, time.Time{}},
		{"two thirds", obtained, expires, obtained.Add(20 * 24 * time.Hour)},
		{"start unknown: a day before", time.Time{}, expires, expires.Add(-24 * time.Hour)},
		{"start after the end: a day before", expires.Add(time.Hour), expires, expires.Add(-24 * time.Hour)},
	} {
		if got := renewTime(tc.obtained, tc.expires); !got.Equal(tc.want) {
			t.Errorf("%s: renewTime = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A runner's first check waits at least an interval (a restart makes no
// GitLab call), and a fleet's checks spread over the next interval.
func TestTokenChecksWaitAnIntervalAndSpread(t *testing.T) {
	c := NewTokenChecks()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var earliest, latest time.Time
	for i := range 200 {
		uid := "uid-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if c.Due(types.UID(uid), now) {
			t.Fatal("a runner's first look is a check")
		}
		if c.Due(types.UID(uid), now.Add(TokenCheckInterval-time.Second)) {
			t.Fatal("checked before an interval passed")
		}
		if !c.Due(types.UID(uid), now.Add(2*TokenCheckInterval)) {
			t.Fatal("not checked two intervals later")
		}
		next := c.Next(types.UID(uid), now)
		if earliest.IsZero() || next.Before(earliest) {
			earliest = next
		}
		if next.After(latest) {
			latest = next
		}
	}
	if latest.Sub(earliest) < TokenCheckInterval/2 {
		t.Errorf("200 runners' checks fall within %v of each other: not spread", latest.Sub(earliest))
	}
}

// A token Secret is read from the API server once per version: while the
// metadata cache shows the resourceVersion read, the copy is handed out.
func TestATokenSecretIsReadOncePerVersion(t *testing.T) {
	var gets atomic.Int32
	cache := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(tokenSecret("glrt-good_token", nil)).Build()
	api := interceptor.NewClient(cache.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				gets.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	r := newReadSecrets(api, cache)
	ctx, key := context.Background(), client.ObjectKey{Namespace: "team", Name: "runner"}
	for range 3 {
		sec := &corev1.Secret{}
		if err := r.Get(ctx, key, sec); err != nil {
			t.Fatal(err)
		}
		if string(sec.Data["token"]) != "glrt-good_token" {
			t.Fatalf("read %q", sec.Data["token"])
		}
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("3 reads of an unchanged Secret asked the API server %d times, want 1", n)
	}
	cur := &corev1.Secret{}
	if err := cache.Get(ctx, key, cur); err != nil {
		t.Fatal(err)
	}
	cur.Data["token"] = []byte("glrt-new_token")
	if err := cache.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{}
	if err := r.Get(ctx, key, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["token"]) != "glrt-new_token" || gets.Load() != 2 {
		t.Errorf("a changed Secret: read %q with %d API reads, want the new token and 2", sec.Data["token"], gets.Load())
	}
}
