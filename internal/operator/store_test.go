package operator

import "testing"

// TestTableNeverReachesALocalRun: only an embedded store's commands ask
// the local tooling for a run's Genace; on a table replay and the console
// use the Genace --genace-url names, or none.
func TestTableNeverReachesALocalRun(t *testing.T) {
	var asked []string
	local := func(db string) (*LocalRun, error) { asked = append(asked, db); return &LocalRun{}, nil }
	if lr, err := (&storeFlags{table: "genjobs-prod"}).localRun(local); lr != nil || err != nil {
		t.Errorf("on a table: %v, %v; want nothing", lr, err)
	}
	if len(asked) != 0 {
		t.Fatalf("the local tooling was asked for %q on a table", asked)
	}
	if lr, _ := (&storeFlags{}).localRun(local); lr == nil || len(asked) != 1 || asked[0] != DefaultDB {
		t.Errorf("on the default store: asked %q; want %s", asked, DefaultDB)
	}
	if lr, err := (&storeFlags{db: "x.db"}).localRun(nil); lr != nil || err != nil {
		t.Errorf("without local tooling: %v, %v; want nothing", lr, err)
	}
}
