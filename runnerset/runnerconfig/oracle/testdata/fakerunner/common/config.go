package common

import (
	"time"

	k8s "k8s.io/api/core/v1"

	"gitlab.com/gitlab-org/gitlab-runner/helpers/creds"
)

type Config struct {
	Name       string `toml:"name,omitempty" json:"name"`
	Skipped    string `toml:"-"`
	unexported string `toml:"unexported"`
	Untagged   int

	Inlined
	*PtrInlined
	Tagged Inlined `toml:"tagged"`
	credentials.Creds

	Left
	Right

	Shallow string `toml:"depth"`

	Dur       time.Duration    `toml:"dur"`
	DurPtr    *time.Duration   `toml:"dur_ptr"`
	MyDur     MyDuration       `toml:"my_dur"`
	Text      TextType         `toml:"text"`
	Promoted  WithPromoted     `toml:"promoted"`
	Alias     ModeAlias        `toml:"alias"`
	Ext       k8s.Thing        `toml:"ext"`
	Iface     any              `toml:"iface"`
	Empty     interface{}      `toml:"empty"`
	Saver     Saver            `toml:"saver"`
	Bad       chan int         `toml:"bad"`
	IntMap    map[int]string   `toml:"int_map"`
	Arr       [2]string        `toml:"arr"`
	Small     int8             `toml:"small"`
	Unsigned  uint16           `toml:"unsigned"`
	Ratio     float32          `toml:"ratio"`
	Node      *Node            `toml:"node"`
	Things    []*Thing         `toml:"things"`
	ByName    map[string]Thing `toml:"by_name"`
	OS        OSOnly           `toml:"os"`
	Open      OpenT            `toml:"open"`
	Defined   DefinedFromAlias `toml:"defined"`
	Anonymous struct {
		Inner bool `toml:"inner"`
	} `toml:"anonymous"`
}

type Inlined struct {
	Inner string `toml:"inner"`
	Depth string `toml:"depth"`
}

type PtrInlined struct {
	FromPointer bool `toml:"from_pointer"`
}

type Left struct {
	Clash string `toml:"clash"`
	Solo  string `toml:"left_only"`
}

type Right struct {
	Clash string `toml:"clash"`
}

type MyDuration time.Duration

type TextType struct {
	Value string `toml:"value"`
}

func (t *TextType) UnmarshalText(b []byte) error { return nil }

type WithPromoted struct {
	TextType
}

type ModeAlias = credentials.Mode

type Saver interface {
	Save() error
}

type Node struct {
	Name     string `toml:"name"`
	Children []Node `toml:"children"`
}

type Thing struct {
	ID   int64             `toml:"id"`
	Tags map[string]string `toml:"tags"`
}

// OpenT embeds a struct the walker cannot see, so its keys are not all known.
type OpenT struct {
	k8s.Meta
	Own string `toml:"own"`
}

// DefinedFromAlias is defined from an alias of a type with UnmarshalText:
// it gets the structure but not the method.
type DefinedFromAlias TextAlias

type TextAlias = TextType
