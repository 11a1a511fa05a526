package artifact

import (
	"os"
	"path/filepath"
	"sort"
)

// The store's own file names, for tests outside the package.
const (
	PackName  = packName
	IndexName = indexName
)

// DurableKeys lists, sorted, the keys the index file under root names in
// complete commits: what a reopened store would hold, not what this
// process remembers.
func DurableKeys(root string) ([]string, error) {
	raw, err := os.ReadFile(filepath.Join(root, indexName))
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(filepath.Join(root, packName))
	if err != nil {
		return nil, err
	}
	objects, _, err := parseIndex(raw, st.Size())
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(objects))
	for k := range objects {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}
