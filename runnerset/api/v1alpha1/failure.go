package v1alpha1

import "fmt"

// Failure is a problem only a spec change can fix: a condition set False
// with Reason (one of the Reason* constants) and Message, which names the
// field and the fix. It is a failure of the pass, never a retry.
//
// +kubebuilder:object:generate=false
type Failure struct {
	Reason  string
	Message string
}

func (f *Failure) Error() string { return f.Message }

// Failf is a Failure whose message is formatted.
func Failf(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Message: fmt.Sprintf(format, args...)}
}
