package gcetest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
)

// vm is what a VM's instance metadata and guest attributes are: shared by the
// Compute API fake (instances.setMetadata, instances.getGuestAttributes) and
// the VM's metadata server (attributes/, guest-attributes/), so a change on
// one side is what the other side sees.
type vm struct {
	mu          sync.Mutex
	keys        []string // item order as set
	attrs       map[string]string
	fingerprint string
	guest       map[string]string // "namespace/key" → value
	changed     chan struct{}     // closed (and replaced) on every attribute change
}

func newVM() *vm {
	return &vm{
		attrs:       map[string]string{},
		guest:       map[string]string{},
		fingerprint: newFingerprint(),
		changed:     make(chan struct{}),
	}
}

// newFingerprint is an opaque 8-byte base64 value, like GCE's.
func newFingerprint() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

func randUint64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	v := binary.BigEndian.Uint64(b[:]) >> 1 // keep it positive as int64 too
	if v == 0 {
		v = 1
	}
	return v
}

// signalLocked wakes every metadata waiter; v.mu must be held.
func (v *vm) signalLocked() {
	v.fingerprint = newFingerprint()
	close(v.changed)
	v.changed = make(chan struct{})
}

// replace sets all items (instances.setMetadata semantics: the list is the
// whole new metadata).
func (v *vm) replace(keys []string, attrs map[string]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.keys = append([]string(nil), keys...)
	v.attrs = map[string]string{}
	for k, val := range attrs {
		v.attrs[k] = val
	}
	v.signalLocked()
}

// replaceIf replaces all items if fingerprint is the current one, in one
// step, so of two writers holding the same fingerprint only one wins.
func (v *vm) replaceIf(fingerprint string, keys []string, attrs map[string]string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if fingerprint != v.fingerprint {
		return false
	}
	v.keys = append([]string(nil), keys...)
	v.attrs = map[string]string{}
	for k, val := range attrs {
		v.attrs[k] = val
	}
	v.signalLocked()
	return true
}

func (v *vm) set(key, value string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.attrs[key]; !ok {
		v.keys = append(v.keys, key)
	}
	v.attrs[key] = value
	v.signalLocked()
}

func (v *vm) del(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.attrs[key]; !ok {
		return
	}
	delete(v.attrs, key)
	for i, k := range v.keys {
		if k == key {
			v.keys = append(v.keys[:i:i], v.keys[i+1:]...)
			break
		}
	}
	v.signalLocked()
}

// get returns the value, whether it exists, its etag and the channel closed
// on the next change.
func (v *vm) get(key string) (value string, ok bool, etag string, changed <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	value, ok = v.attrs[key]
	return value, ok, etagOf(value, ok), v.changed
}

type item struct{ key, value string }

func (v *vm) items() (items []item, fingerprint string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range v.keys {
		items = append(items, item{k, v.attrs[k]})
	}
	return items, v.fingerprint
}

func (v *vm) guestEnabled() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.EqualFold(strings.TrimSpace(v.attrs["enable-guest-attributes"]), "true")
}

func (v *vm) setGuest(nsKey, value string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.guest[nsKey] = value
}

func (v *vm) delGuest(nsKey string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.guest, nsKey)
}

func (v *vm) guestCopy() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.guest))
	for k, val := range v.guest {
		out[k] = val
	}
	return out
}

// guestUnder lists the guest attributes whose "namespace/key" starts with
// prefix, sorted.
func (v *vm) guestUnder(prefix string) []item {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []item
	for k, val := range v.guest {
		if strings.HasPrefix(k, prefix) {
			out = append(out, item{k, val})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// etagOf is a content hash, so an etag changes exactly when the value (or
// its existence) does.
func etagOf(value string, ok bool) string {
	h := fnv.New64a()
	if ok {
		h.Write([]byte("v\x00" + value))
	} else {
		h.Write([]byte("absent\x00"))
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
