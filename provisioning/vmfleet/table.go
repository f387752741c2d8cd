package vmfleet

import (
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { io.WriteString(t.tw, strings.Join(cells, "\t")+"\n") }

func (t *table) flush() { t.tw.Flush() }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
