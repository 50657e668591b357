package verify

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Formats of the report.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatJUnit = "junit"
)

// Write prints the report in the given format.
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case FormatTable, "":
		return r.writeTable(w)
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case FormatJUnit:
		return r.writeJUnit(w)
	}
	return fmt.Errorf("unknown output format %q", format)
}

// evidenceWidth wraps evidence so that a table stays readable in a terminal;
// nothing is cut.
const evidenceWidth = 100

func (r *Report) writeTable(w io.Writer) error {
	nameW := len("CHECK")
	for _, c := range r.Checks {
		nameW = max(nameW, len(c.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s  %-*s  %7s  %s\n", "STATUS", nameW, "CHECK", "TIME", "EVIDENCE")
	indent := strings.Repeat(" ", 12+2+nameW+2+7+2)
	for _, c := range r.Checks {
		lines := wrap(c.Evidence, evidenceWidth)
		fmt.Fprintf(&b, "%-12s  %-*s  %7s  %s\n", c.Status, nameW, c.Name, seconds(c.DurationMS), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "%s%s\n", indent, l)
		}
	}
	if len(r.Caveats) > 0 {
		b.WriteString("\nCaveats (true of this deployment, not hidden):\n")
		for _, c := range r.Caveats {
			lines := wrap(c, evidenceWidth+nameW)
			fmt.Fprintf(&b, "  - %s\n", lines[0])
			for _, l := range lines[1:] {
				fmt.Fprintf(&b, "    %s\n", l)
			}
		}
	}
	s := r.Summary
	verdict := "OK"
	if !s.OK {
		verdict = "NOT OK"
	}
	fmt.Fprintf(&b, "\n%d checks: %d PASS, %d FAIL, %d INCONCLUSIVE, %d SKIP in %s: %s",
		s.Total, s.Pass, s.Fail, s.Inconclusive, s.Skip, seconds(s.DurationMS), verdict)
	if s.Inconclusive > 0 && s.AllowInconclusive {
		b.WriteString(" (INCONCLUSIVE allowed by --allow-inconclusive)")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func seconds(ms int64) string { return fmt.Sprintf("%.1fs", float64(ms)/1000) }

// wrap splits s into lines of at most width runes at spaces (a longer word
// stays whole); explicit newlines are kept.
func wrap(s string, width int) []string {
	var out []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			switch {
			case line == "":
				line = word
			case len(line)+1+len(word) > width:
				out = append(out, line)
				line = word
			default:
				line += " " + word
			}
		}
		out = append(out, line)
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      string      `xml:"time,attr"`
	Cases     []junitCase `xml:"testcase"`
	SystemOut string      `xml:"system-out,omitempty"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

// writeJUnit maps FAIL to a failure, INCONCLUSIVE to a failure of type
// INCONCLUSIVE (a skip when --allow-inconclusive), and SKIP to a skip, so that
// a CI system's verdict agrees with verify's exit code.
func (r *Report) writeJUnit(w io.Writer) error {
	suite := junitSuite{Name: "sandbox verify", Tests: len(r.Checks), Time: secs(r.Summary.DurationMS)}
	for _, c := range r.Checks {
		jc := junitCase{Classname: "verify." + c.Group(), Name: c.Name, Time: secs(c.DurationMS)}
		msg := &junitMessage{Message: string(c.Status), Type: string(c.Status), Text: c.Evidence}
		switch {
		case c.Status == Fail, c.Status == Inconclusive && !r.Summary.AllowInconclusive:
			jc.Failure = msg
			suite.Failures++
		case c.Status == Skip, c.Status == Inconclusive:
			jc.Skipped = msg
			suite.Skipped++
		default:
			jc.SystemOut = c.Evidence
		}
		suite.Cases = append(suite.Cases, jc)
	}
	if len(r.Caveats) > 0 {
		suite.SystemOut = "Caveats:\n- " + strings.Join(r.Caveats, "\n- ")
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{suite}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func secs(ms int64) string { return fmt.Sprintf("%.3f", float64(ms)/1000) }
