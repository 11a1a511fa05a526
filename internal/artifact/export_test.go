package artifact

import "sort"

// The store's own file names, for tests outside the package.
const (
	PackName  = packName
	IndexName = indexName
)

// Keys lists the stored keys, sorted.
func (d *Dir) Keys() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.objects))
	for k := range d.objects {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
