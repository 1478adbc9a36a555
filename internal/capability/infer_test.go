package capability

import (
	"slices"
	"testing"
)

func TestMerge(t *testing.T) {
	pg := Finding{Capability: "postgres", Source: Lockfile, Evidence: "requirements.txt: psycopg2==2.9.9"}
	xml := Finding{Capability: "xml", Source: Lockfile, Evidence: "poetry.lock: lxml 5.2.1"}
	xmlELF := Finding{Capability: "xml", Source: ELF, Evidence: ".venv/lib/x.so needs libxml2.so.2"}
	unknown := Finding{Source: ELF, Evidence: ".venv/lib/x.so needs libfoo.so.1"}
	tests := []struct {
		name     string
		explicit []string
		inferred []Finding
		auto     bool
		want     []string
		findings []Finding
	}{
		{name: "nothing"},
		{
			name: "auto off keeps explicit only", explicit: []string{"ssl"}, inferred: []Finding{pg, xml},
			want: []string{"ssl"}, findings: []Finding{{Capability: "ssl", Source: Explicit}},
		},
		{
			name: "auto adds inferred", explicit: []string{"ssl"}, inferred: []Finding{xml, pg, xmlELF, unknown}, auto: true,
			want:     []string{"postgres", "ssl", "xml"},
			findings: []Finding{pg, {Capability: "ssl", Source: Explicit}, xml, xmlELF},
		},
		{
			name: "explicit wins over inferred", explicit: []string{"postgres"}, inferred: []Finding{pg}, auto: true,
			want: []string{"postgres"}, findings: []Finding{{Capability: "postgres", Source: Explicit}},
		},
		{
			name: "duplicates collapse", explicit: []string{"zlib", "zlib", ""}, inferred: []Finding{xml, xml}, auto: true,
			want: []string{"xml", "zlib"}, findings: []Finding{xml, {Capability: "zlib", Source: Explicit}},
		},
		{name: "unknown sonames add nothing", inferred: []Finding{unknown}, auto: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps, findings := Merge(tt.explicit, tt.inferred, tt.auto)
			if !slices.Equal(caps, tt.want) {
				t.Errorf("caps = %q, want %q", caps, tt.want)
			}
			if !slices.Equal(findings, tt.findings) {
				t.Errorf("findings = %+v\nwant %+v", findings, tt.findings)
			}
		})
	}
}
