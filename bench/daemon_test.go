package main

import "testing"

func TestMetricSum(t *testing.T) {
	text := `# HELP ruled_plugin_pool_instances Instances.
# TYPE ruled_plugin_pool_instances gauge
ruled_plugin_pool_instances{plugin="fixedwindow",state="busy"} 3
ruled_plugin_pool_instances{plugin="fixedwindow",state="idle"} 5
ruled_plugin_pool_instances_total 100
go_memstats_heap_inuse_bytes 1.048576e+07
`
	if v, ok := metricSum(text, "ruled_plugin_pool_instances"); !ok || v != 8 {
		t.Errorf("instances = %v, %v; want 8 (not the _total metric)", v, ok)
	}
	if v, ok := metricSum(text, "go_memstats_heap_inuse_bytes"); !ok || v != 10485760 {
		t.Errorf("heap = %v, %v", v, ok)
	}
	if _, ok := metricSum(text, "go_goroutines"); ok {
		t.Error("an absent metric was found")
	}
}
