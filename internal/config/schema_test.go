package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The JSON Schema at config/pinfold.schema.json is for editors. These
// tests keep it honest: every example config validates against it, some
// broken ones do not, and its property names are exactly the keys the
// decoder accepts.

const schemaPath = "../../config/pinfold.schema.json"

func loadSchema(t testing.TB) map[string]any {
	t.Helper()
	data, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", schemaPath, err)
	}
	return s
}

// toJSON converts a node tree to the JSON value an editor's YAML 1.2
// reading gives (plain true is a boolean, plain 1 a number...).
func toJSON(n *node) any {
	switch {
	case n.null:
		return nil
	case n.kind == mapNode:
		m := map[string]any{}
		for i := 0; i < len(n.items); i += 2 {
			m[n.items[i].value] = toJSON(&n.items[i+1])
		}
		return m
	case n.kind == seqNode:
		s := []any{}
		for i := range n.items {
			s = append(s, toJSON(&n.items[i]))
		}
		return s
	case n.style != plainStyle:
		return n.value
	}
	v := n.value
	switch {
	case v == "true":
		return true
	case v == "false":
		return false
	case isNullWord(v):
		return nil
	case regexp.MustCompile(`^[-+]?[0-9]+$`).MatchString(v):
		f, _ := strconv.ParseFloat(v, 64)
		return f
	case regexp.MustCompile(`^0x[0-9a-fA-F]+$|^0o[0-7]+$`).MatchString(v):
		i, _ := strconv.ParseInt(strings.Replace(v, "0o", "0", 1), 0, 64)
		return float64(i)
	case regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`).MatchString(v):
		f, _ := strconv.ParseFloat(v, 64)
		return f
	case regexp.MustCompile(`^[-+]?\.(inf|Inf|INF)$`).MatchString(v):
		return math.Inf(1)
	case regexp.MustCompile(`^\.(nan|NaN|NAN)$`).MatchString(v):
		return math.NaN()
	}
	return v
}

// validator checks a JSON value against a JSON Schema using only the
// keywords pinfold's schema uses; any other keyword is an error, so the
// schema cannot grow keywords nothing checks.
type validator struct {
	root map[string]any
}

var annotations = []string{"$schema", "$id", "title", "description"}

func (v *validator) validate(schema, x any, at string) []string {
	s, ok := schema.(map[string]any)
	if !ok {
		if b, ok := schema.(bool); ok {
			if b {
				return nil
			}
			return []string{at + ": not allowed"}
		}
		return []string{at + ": bad schema"}
	}
	var errs []string
	fail := func(format string, a ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, a...)) }
	for k, kw := range s {
		switch k {
		case "$ref":
			ref := kw.(string)
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			def, found := v.root["$defs"].(map[string]any)[name]
			if !ok || !found {
				fail("unresolved $ref %s", ref)
				continue
			}
			errs = append(errs, v.validate(def, x, at)...)
		case "allOf":
			for _, sub := range kw.([]any) {
				errs = append(errs, v.validate(sub, x, at)...)
			}
		case "oneOf", "anyOf":
			n := 0
			var subErrs []string
			for _, sub := range kw.([]any) {
				e := v.validate(sub, x, at)
				if len(e) == 0 {
					n++
				}
				subErrs = append(subErrs, e...)
			}
			if n == 0 || k == "oneOf" && n > 1 {
				fail("%s: %d branches match (%s)", k, n, strings.Join(subErrs, "; "))
			}
		case "type":
			var types []string
			switch t := kw.(type) {
			case string:
				types = []string{t}
			case []any:
				for _, e := range t {
					types = append(types, e.(string))
				}
			}
			if !slices.ContainsFunc(types, func(t string) bool { return hasType(x, t) }) {
				fail("%v is not of type %v", x, types)
			}
		case "enum":
			if !slices.ContainsFunc(kw.([]any), func(e any) bool { return reflect.DeepEqual(e, x) }) {
				fail("%v is not one of %v", x, kw)
			}
		case "pattern":
			if str, ok := x.(string); ok {
				re, err := regexp.Compile(kw.(string))
				if err != nil {
					fail("bad pattern: %v", err)
				} else if !re.MatchString(str) {
					fail("%q does not match %s", str, kw)
				}
			}
		case "minLength":
			if str, ok := x.(string); ok && float64(utf8.RuneCountInString(str)) < kw.(float64) {
				fail("%q is shorter than %v", str, kw)
			}
		case "minimum":
			if f, ok := x.(float64); ok && f < kw.(float64) {
				fail("%v is less than %v", f, kw)
			}
		case "exclusiveMinimum":
			if f, ok := x.(float64); ok && f <= kw.(float64) {
				fail("%v is not more than %v", f, kw)
			}
		case "minItems":
			if a, ok := x.([]any); ok && float64(len(a)) < kw.(float64) {
				fail("%d items, fewer than %v", len(a), kw)
			}
		case "items":
			if a, ok := x.([]any); ok {
				for i, e := range a {
					errs = append(errs, v.validate(kw, e, fmt.Sprintf("%s[%d]", at, i))...)
				}
			}
		case "required":
			if m, ok := x.(map[string]any); ok {
				for _, r := range kw.([]any) {
					if _, ok := m[r.(string)]; !ok {
						fail("missing %s", r)
					}
				}
			}
		case "dependentRequired":
			if m, ok := x.(map[string]any); ok {
				for p, reqs := range kw.(map[string]any) {
					if _, ok := m[p]; !ok {
						continue
					}
					for _, r := range reqs.([]any) {
						if _, ok := m[r.(string)]; !ok {
							fail("%s needs %s", p, r)
						}
					}
				}
			}
		case "properties":
			if m, ok := x.(map[string]any); ok {
				for p, sub := range kw.(map[string]any) {
					if val, ok := m[p]; ok {
						errs = append(errs, v.validate(sub, val, at+"."+p)...)
					}
				}
			}
		case "additionalProperties":
			if m, ok := x.(map[string]any); ok {
				props, _ := s["properties"].(map[string]any)
				for p, val := range m {
					if _, ok := props[p]; !ok {
						errs = append(errs, v.validate(kw, val, at+"."+p)...)
					}
				}
			}
		case "propertyNames":
			if m, ok := x.(map[string]any); ok {
				for p := range m {
					errs = append(errs, v.validate(kw, p, at+" key "+strconv.Quote(p))...)
				}
			}
		case "$defs":
		default:
			if !slices.Contains(annotations, k) {
				fail("unsupported schema keyword %q", k)
			}
		}
	}
	sort.Strings(errs)
	return errs
}

func hasType(x any, t string) bool {
	switch t {
	case "object":
		_, ok := x.(map[string]any)
		return ok
	case "array":
		_, ok := x.([]any)
		return ok
	case "string":
		_, ok := x.(string)
		return ok
	case "boolean":
		_, ok := x.(bool)
		return ok
	case "number":
		_, ok := x.(float64)
		return ok
	case "integer":
		f, ok := x.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "null":
		return x == nil
	}
	return false
}

// example is a config found in the repository.
type example struct {
	name string
	data []byte
}

// examples returns every config in the repository that must be valid:
// the init templates, the yaml blocks of docs/config.md (fragments get
// "version: 1" put in front) and testdata/*.yaml.
func examples(t *testing.T) []example {
	var ex []example
	for _, name := range Templates() {
		data, _ := Template(name)
		ex = append(ex, example{"template " + name, data})
	}
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(string(doc))
	if len(blocks) < 10 {
		t.Fatalf("docs/config.md has %d yaml examples; the reference shows more", len(blocks))
	}
	for _, b := range blocks {
		data := b.text
		if !regexp.MustCompile(`(?m)^version:`).MatchString(data) {
			data = "version: 1\n" + data
		}
		ex = append(ex, example{fmt.Sprintf("docs/config.md:%d", b.line), []byte(data)})
	}
	files, _ := filepath.Glob("testdata/*.yaml")
	if len(files) == 0 {
		t.Fatal("no testdata/*.yaml")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ex = append(ex, example{f, data})
	}
	return ex
}

type docBlock struct {
	line int
	text string
}

// docBlocks returns the ```yaml blocks of a Markdown text.
func docBlocks(md string) []docBlock {
	var blocks []docBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```yaml" {
			continue
		}
		start := i + 1
		var b strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.WriteString(lines[i])
			b.WriteByte('\n')
		}
		blocks = append(blocks, docBlock{start + 1, b.String()})
	}
	return blocks
}

func TestExamplesMatchSchema(t *testing.T) {
	v := &validator{root: loadSchema(t)}
	for _, ex := range examples(t) {
		t.Run(ex.name, func(t *testing.T) {
			if _, err := Parse(ex.name, ex.data); err != nil {
				t.Fatalf("does not load:\n%v", err)
			}
			n, err := parseYAML(ex.name, string(ex.data))
			if err != nil {
				t.Fatal(err)
			}
			if errs := v.validate(v.root, toJSON(&n), "$"); len(errs) > 0 {
				t.Errorf("does not match the schema:\n%s", strings.Join(errs, "\n"))
			}
		})
	}
}

// TestSchemaRefuses checks that the schema is not vacuous: configs the
// decoder refuses, for reasons a schema can express, fail it too.
func TestSchemaRefuses(t *testing.T) {
	v := &validator{root: loadSchema(t)}
	const ok = "version: 1\n"
	for _, in := range []string{
		"network: none\n",
		"version: 2\n",
		ok + "netwrok: none\n",
		ok + "network: outbound-only\n",
		ok + "allow: [\"exa mple.org\"]\n",
		ok + "ports: [\"80\"]\n",
		ok + "host_loopback: yes\n",
		ok + "backend: kvm\n",
		ok + "base: debian\n",
		ok + "base: dir:~bob/x\n",
		ok + "access: write\n",
		ok + "workdir: src\n",
		ok + "user: nobody\n",
		ok + "hostname: a_b\n",
		ok + "mounts: [/a]\n",
		ok + "mounts: [/a:b]\n",
		ok + "mounts: [/a:/b:rx]\n",
		ok + "mounts: [\"/a:/\"]\n",
		ok + "mounts: [{source: /a}]\n",
		ok + "mounts: [{source: /a, target: /b, mode: ro}]\n",
		ok + "cap_add: [NET_RWA]\n",
		ok + "capabilities: [NET_RAW]\n",
		ok + "cap_add: NET_RAW\n",
		ok + "env: {allow: [A]}\n",
		ok + "env: {pass: [A=1]}\n",
		ok + "env: {set: {1A: x}}\n",
		ok + "env: {set: {A: [1]}}\n",
		ok + "caches: [{name: Npm, path: /a}]\n",
		ok + "caches: [{name: .., path: /a}]\n",
		ok + "caches: [{name: a, path: a}]\n",
		ok + "caches: [{name: a}]\n",
		ok + "secrets: [{name: a}]\n",
		ok + "secrets: [{name: a, file: /a, env: A-B}]\n",
		ok + "limits: {memory: lots}\n",
		ok + "limits: {memory: 1.5}\n",
		ok + "limits: {pids: 0}\n",
		ok + "limits: {pids: 1.5}\n",
		ok + "limits: {cpus: 0}\n",
		ok + "limits: {timeout: soon}\n",
		ok + "limits: {timeout: -5m}\n",
		ok + "limits: {memroy: 1g}\n",
		ok + "role: deploy\n",
		ok + "lockfile_files: [/x.lock]\n",
		ok + "require_lockfile: \"true\"\n",
		ok + "pre_run: {cmd: x}\n",
		ok + "pre_run: [[]]\n",
		ok + "host: {deny: [x]}\n",
		ok + "profiles: [a]\n",
		ok + "profiles: {\"a b\": {}}\n",
		ok + "profiles: {a: {workspace: /x}}\n",
		ok + "profiles: {a: {version: 1}}\n",
		ok + "dispatch: {a: b}\n",
		ok + "dispatch: [{profile: a}]\n",
		ok + "dispatch: [{match: x}]\n",
		ok + "dispatch: [{match: x, regex: y, profile: a}]\n",
		ok + "dispatch: [{match: x, args: [y], profile: a}]\n",
		ok + "dispatch: [{command: /usr/bin/npm, profile: a}]\n",
	} {
		if _, err := Parse("p.yaml", []byte(in)); err == nil {
			t.Errorf("the decoder accepts %q", in)
		}
		n, err := parseYAML("p.yaml", in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if errs := v.validate(v.root, toJSON(&n), "$"); len(errs) == 0 {
			t.Errorf("the schema accepts %q", in)
		}
	}
}

// The decoder's key tables, by the JSON pointer of the object schema
// that describes the same mapping.
func decoderTables() map[string][]string {
	return map[string][]string{
		"#":                 topKeys[:],
		"#/$defs/settings":  profileKeys[:],
		"#/$defs/env":       envKeys[:],
		"#/$defs/limits":    limitsKeys[:],
		"#/$defs/host":      hostKeys[:],
		"#/$defs/cache":     cacheKeys[:],
		"#/$defs/secret":    secretKeys[:],
		"#/$defs/mountMap":  mountKeys[:],
		"#/$defs/rule":      ruleKeys[:],
		"#/properties/pack": packKeys[:],
		"#/properties/mcp":  mcpKeys[:],
	}
}

// TestSchemaKeysMatchDecoder walks the schema for every object with
// properties and compares its property names with the decoder's table.
func TestSchemaKeysMatchDecoder(t *testing.T) {
	schema := loadSchema(t)
	tables := decoderTables()
	seen := map[string]bool{}
	var walk func(x any, ptr string)
	walk = func(x any, ptr string) {
		switch x := x.(type) {
		case map[string]any:
			if props, ok := x["properties"].(map[string]any); ok {
				if ap, ok := x["additionalProperties"].(bool); !ok || ap {
					t.Errorf("%s: an object without additionalProperties: false", ptr)
				}
				want, ok := tables[ptr]
				if !ok {
					t.Errorf("%s: an object schema the decoder has no key table for", ptr)
				}
				var got []string
				for k := range props {
					got = append(got, k)
				}
				sort.Strings(got)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: schema properties\n%v\ndecoder keys\n%v", ptr, got, want)
				}
				seen[ptr] = true
			}
			for k, sub := range x {
				walk(sub, ptr+"/"+k)
			}
		case []any:
			for i, sub := range x {
				walk(sub, ptr+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(schema, "#")
	for ptr, keys := range tables {
		if keys != nil && !seen[ptr] {
			t.Errorf("%s: no such object in the schema", ptr)
		}
	}
	for _, table := range tables {
		if !sort.StringsAreSorted(table) {
			t.Errorf("key table %v is not sorted", table)
		}
	}
}

// TestDecoderKeyTables checks the tables against the decoder itself:
// every key in a table gets past the unknown-key check, and any other
// key is refused with exactly the table as the allowed keys.
func TestDecoderKeyTables(t *testing.T) {
	docs := []struct {
		table  []string
		format string
	}{
		{topKeys[:], "version: 1\n%s: [[]]\n"},
		{profileKeys[:], "version: 1\nprofiles:\n  p:\n    %s: [[]]\n"},
		{envKeys[:], "version: 1\nenv:\n  %s: [[]]\n"},
		{limitsKeys[:], "version: 1\nlimits:\n  %s: [[]]\n"},
		{hostKeys[:], "version: 1\nhost:\n  %s: [[]]\n"},
		{cacheKeys[:], "version: 1\ncaches:\n  - %s: [[]]\n"},
		{secretKeys[:], "version: 1\nsecrets:\n  - %s: [[]]\n"},
		{mountKeys[:], "version: 1\nmounts:\n  - %s: [[]]\n"},
		{ruleKeys[:], "version: 1\ndispatch:\n  - %s: [[]]\n"},
	}
	for _, d := range docs {
		for _, k := range d.table {
			if k == "version" {
				continue
			}
			_, err := Parse("p.yaml", []byte(fmt.Sprintf(d.format, k)))
			var e *Error
			if err == nil || !errors.As(err, &e) || strings.HasPrefix(e.Msg, "unknown key") || e.Allowed != nil {
				t.Errorf("key %q in %q: %v", k, d.format, err)
			}
		}
		_, err := Parse("p.yaml", []byte(fmt.Sprintf(d.format, "zzz")))
		var e *Error
		if !errors.As(err, &e) || !strings.HasPrefix(e.Msg, `unknown key "zzz"`) || !reflect.DeepEqual(e.Allowed, d.table) {
			t.Errorf("key zzz in %q: %v", d.format, err)
		}
	}
}

// TestSchemaDescribesEveryKey wants a description on every property, for
// editors to show.
func TestSchemaDescribesEveryKey(t *testing.T) {
	schema := loadSchema(t)
	defs := schema["$defs"].(map[string]any)
	described := func(x any) bool {
		m := x.(map[string]any)
		if _, ok := m["description"]; ok {
			return true
		}
		if ref, ok := m["$ref"].(string); ok {
			_, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)["description"]
			return ok
		}
		return false
	}
	var walk func(x any, ptr string)
	walk = func(x any, ptr string) {
		m, ok := x.(map[string]any)
		if !ok {
			return
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for k, p := range props {
				if !described(p) {
					t.Errorf("%s/properties/%s has no description", ptr, k)
				}
			}
		}
		for k, sub := range m {
			if k != "properties" {
				walk(sub, ptr+"/"+k)
			}
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for k, sub := range props {
				walk(sub, ptr+"/properties/"+k)
			}
		}
	}
	walk(schema, "#")
}
