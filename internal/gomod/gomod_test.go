package gomod

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestDownloadHonoursContextCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const mod, ver = "github.com/google/uuid", "v1.6.0"
	_, err := Download(ctx, mod, ver)
	if err == nil {
		t.Fatal("Download with a cancelled context succeeded")
	}
	if !strings.Contains(err.Error(), mod+"@"+ver) {
		t.Errorf("error does not name the module: %v", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error does not wrap context.Canceled: %v", err)
	}
}

func TestDownloadNamesAMissingVersion(t *testing.T) {
	_, err := Download(context.Background(), "github.com/google/uuid", "v0.0.0-nonexistent")
	if err == nil || !strings.Contains(err.Error(), "github.com/google/uuid@v0.0.0-nonexistent") {
		t.Fatalf("Download of a missing version = %v, want an error naming it", err)
	}
}
