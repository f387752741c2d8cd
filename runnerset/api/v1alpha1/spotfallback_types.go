package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// SpotFallback moves a tag whose jobs lose their spot nodes often to
// on-demand capacity for a while: once Interruptions job pods of one
// RunnerSet were taken away within Window (the interruptions the
// controller records as JobInterrupted), the tag's NodePool (or
// ComputeClass) asks for on-demand capacity only, for OnDemandFor; then it
// asks for the RunnerSet's own capacity types again. The class must allow
// on-demand capacity (allowedCapacityTypes).
type SpotFallback struct {
	// Interruptions is how many interrupted jobs of one RunnerSet within
	// window move its tag to on-demand capacity, 1 to 100.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	Interruptions int32 `json:"interruptions"`

	// Window is how far back interruptions count, 1m to 24h, for example 1h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="policy.spotFallback.window must be between 1m and 24h, for example 1h"
	// +required
	Window metav1.Duration `json:"window"`

	// OnDemandFor is how long the tag stays on on-demand capacity, 1m to
	// 168h, for example 2h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="policy.spotFallback.onDemandFor must be between 1m and 168h, for example 2h"
	// +required
	OnDemandFor metav1.Duration `json:"onDemandFor"`
}

// SpotFallbackStatus is where a RunnerSet stands against its class's
// policy.spotFallback.
type SpotFallbackStatus struct {
	// Interruptions are when the RunnerSet's job pods were last taken away,
	// within the class's window (at most its count).
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Interruptions []metav1.Time `json:"interruptions,omitempty"`

	// OnDemandUntil is when the tag's capacity goes back to the RunnerSet's
	// own capacity types; until then it asks for on-demand capacity only.
	// +optional
	OnDemandUntil *metav1.Time `json:"onDemandUntil,omitempty"`
}

// ReasonSpotFallback is the Warning Event of a RunnerSet whose tag moves
// to on-demand capacity after repeated interruptions.
const ReasonSpotFallback = "SpotFallback"
