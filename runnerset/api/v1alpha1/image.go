package v1alpha1

// ImageReference is a container image reference, such as
// registry.gitlab.com/gitlab-org/gitlab-runner:alpine-v19.4.0 or
// alpine:3.22, as the container runtime parses it.
//
// The admission rule below is the reference grammar of
// github.com/distribution/reference (ReferenceRegexp), the parser the
// container runtimes use, verbatim: a test checks it against that module,
// and that the API server accepts exactly the strings the parser does. A
// leading space, a trailing newline or an upper-case repository never
// reaches a Deployment.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=512
// +kubebuilder:validation:XValidation:rule=`self.matches(r'^((?:(?:(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*|\[(?:[a-fA-F0-9:]+)\])(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*)(?::([\w][\w.-]{0,127}))?(?:@([A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}))?$')`,message="must be an image reference such as registry.example.com/team/image:v1.2.3 or alpine:3.22: lower-case repository, no spaces or newlines"
type ImageReference string
