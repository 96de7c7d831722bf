package envoyconfig

import (
	"strconv"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/rules"
)

// FromXDS is the envoy ratelimit config file that an xDS RateLimitConfig
// resource stands for, as envoy ratelimit itself converts one: the same
// fields under their YAML names, the unit left out when UNKNOWN (an
// unlimited rate limit has none), false flags and empty names left out.
// It goes through the same parser and translation as a file, so a config
// decides alike whichever way it comes; positions in its errors are lines
// of this rendering, and its name is "xds:" and the resource's name.
func FromXDS(res *rlsconf.RateLimitConfig) Source {
	root := mapping()
	if res.GetDomain() != "" {
		add(root, "domain", str(res.GetDomain()))
	}
	if ds := res.GetDescriptors(); len(ds) > 0 {
		add(root, "descriptors", xdsDescriptors(ds))
	}
	content, err := yaml.Marshal(root)
	if err != nil { // a tree of strings, numbers and booleans always marshals
		panic("envoyconfig: rendering an xDS resource: " + err.Error())
	}
	name := res.GetName()
	if name == "" {
		name = res.GetDomain()
	}
	return Source{Name: "xds:" + name, Content: content}
}

func xdsDescriptors(ds []*rlsconf.RateLimitDescriptor) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, d := range ds {
		m := mapping()
		add(m, "key", str(d.GetKey()))
		if d.GetValue() != "" {
			add(m, "value", str(d.GetValue()))
		}
		if rl := d.GetRateLimit(); rl != nil {
			add(m, "rate_limit", xdsRateLimit(rl))
		}
		if d.GetShadowMode() {
			add(m, "shadow_mode", boolean(true))
		}
		if d.GetDetailedMetric() {
			add(m, "detailed_metric", boolean(true))
		}
		if len(d.GetDescriptors()) > 0 {
			add(m, "descriptors", xdsDescriptors(d.GetDescriptors()))
		}
		seq.Content = append(seq.Content, m)
	}
	return seq
}

func xdsRateLimit(rl *rlsconf.RateLimitPolicy) *yaml.Node {
	m := mapping()
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		add(m, "unit", str(rl.GetUnit().String()))
	}
	if !rl.GetUnlimited() || rl.GetRequestsPerUnit() != 0 {
		add(m, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(rl.GetRequestsPerUnit()), 10)})
	}
	if rl.GetUnlimited() {
		add(m, "unlimited", boolean(true))
	}
	if rl.GetName() != "" {
		add(m, "name", str(rl.GetName()))
	}
	if len(rl.GetReplaces()) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, r := range rl.GetReplaces() {
			e := mapping()
			add(e, "name", str(r.GetName()))
			seq.Content = append(seq.Content, e)
		}
		add(m, "replaces", seq)
	}
	return m
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

func add(m *yaml.Node, key string, val *yaml.Node) { m.Content = append(m.Content, str(key), val) }

// RuleSources are the translated files as rule files to load
// (host.RuleSource), each named after the config it was translated from.
func RuleSources(files []File) []rules.Source {
	srcs := make([]rules.Source, len(files))
	for i, f := range files {
		srcs[i] = rules.Source{Name: f.Source + " (translated: " + f.Name + ")", Content: f.Content}
	}
	return srcs
}
