package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"node_selector", "namespace", "image", "lifecycleRules", "labels"}
	for key, want := range map[string]string{
		"node_selectors": "node_selector",
		"lifecycleRule":  "lifecycleRules",
		"Image":          "image",
		"lables":         "labels",
		"completely":     "",
		"":               "",
	} {
		if got := Closest(key, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", key, got, want)
		}
	}
	if got := Closest("x", nil); got != "" {
		t.Errorf("Closest with nothing known = %q", got)
	}
}
