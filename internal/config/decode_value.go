package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pinfold/pinfold/internal/units"
)

// want checks that v is a collection of kind k.
func (d *decoder) want(v *node, k kind, key, what string) error {
	switch {
	case v.null:
		empty := "{}"
		if k == seqNode {
			empty = "[]"
		}
		return d.errorf(v.pos, "%s has no value; it takes %s (write %s for none)", key, what, empty)
	case v.kind != k:
		return d.errorf(v.pos, "%s must be %s, not %s", key, what, describe(v))
	}
	return nil
}

// describe names what a node is, for messages.
func describe(v *node) string {
	switch v.kind {
	case mapNode:
		return "a mapping"
	case seqNode:
		return "a list"
	}
	return "a single value"
}

// isNullWord reports the plain scalars YAML reads as null.
func isNullWord(s string) bool {
	return s == "~" || s == "null" || s == "Null" || s == "NULL"
}

// scalar returns the text of a single value.
func (d *decoder) scalar(v *node, key string) (string, error) {
	switch {
	case v.null:
		return "", d.errorf(v.pos, "%s has no value", key)
	case v.kind != scalarNode:
		return "", d.errorf(v.pos, "%s must be a single value, not %s", key, describe(v))
	case v.style == plainStyle && isNullWord(v.value):
		return "", d.errorf(v.pos, "%s: %s means \"no value\" in YAML; leave the key out, or quote it if you mean the text", key, v.value)
	}
	return v.value, nil
}

// check turns a problem found by a checker into an error at v.
func (d *decoder) check(v *node, key, problem string) error {
	if problem == "" {
		return nil
	}
	return d.errorf(v.pos, "invalid %s %q: %s", key, v.value, problem)
}

// stringp decodes a single value that check accepts.
func (d *decoder) stringp(v *node, key string, check func(string) string) (*string, error) {
	s, err := d.scalar(v, key)
	if err != nil {
		return nil, err
	}
	if err := d.check(v, key, check(s)); err != nil {
		return nil, err
	}
	return &s, nil
}

// enum decodes one of a few words.
func (d *decoder) enum(v *node, key string, values []string) (*string, error) {
	s, err := d.scalar(v, key)
	if err != nil {
		return nil, err
	}
	for _, ok := range values {
		if s == ok {
			return &s, nil
		}
	}
	msg := fmt.Sprintf("invalid %s %q", key, s)
	if sg := suggest(s, values); sg != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", sg)
	}
	return nil, d.errorf(v.pos, "%s; allowed: %s", msg, strings.Join(values, ", "))
}

// strings decodes a list of single values, each accepted by check.
func (d *decoder) strings(v *node, key string, check func(string) string) ([]string, error) {
	if err := d.want(v, seqNode, key, "a list"); err != nil {
		return nil, err
	}
	list := make([]string, 0, len(v.items))
	for i := range v.items {
		it := &v.items[i]
		s, err := d.scalar(it, key+" item")
		if err != nil {
			return nil, err
		}
		if problem := check(s); problem != "" {
			return nil, d.errorf(it.pos, "invalid %s item %q: %s", key, s, problem)
		}
		list = append(list, s)
	}
	return list, nil
}

// boolean decodes true or false, written plain.
func (d *decoder) boolean(v *node, key string) (bool, error) {
	if v.kind == scalarNode && !v.null && v.style == plainStyle {
		switch v.value {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	if v.kind == scalarNode && !v.null {
		return false, d.errorf(v.pos, "%s must be true or false, not %q", key, v.value)
	}
	return false, d.errorf(v.pos, "%s must be true or false", key)
}

// boolp is boolean's value for a setting that may be unset (nil).
func (d *decoder) boolp(v *node, key string) (*bool, error) {
	b, err := d.boolean(v, key)
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// integer decodes a decimal integer, written plain.
func (d *decoder) integer(v *node, key string) (int64, error) {
	if v.kind == scalarNode && !v.null && v.style == plainStyle && isDigits(v.value) {
		if n, err := strconv.ParseInt(v.value, 10, 64); err == nil {
			return n, nil
		}
		return 0, d.errorf(v.pos, "%s: %s is too large", key, v.value)
	}
	if v.kind == scalarNode && !v.null {
		return 0, d.errorf(v.pos, "%s must be a whole number, not %q", key, v.value)
	}
	return 0, d.errorf(v.pos, "%s must be a whole number", key)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// number decodes a decimal number (2, 0.5), written plain.
func (d *decoder) number(v *node, key string) (float64, error) {
	if v.kind == scalarNode && !v.null && v.style == plainStyle {
		whole, frac, dot := strings.Cut(v.value, ".")
		if (whole == "" || isDigits(whole)) && (!dot || isDigits(frac)) && whole+frac != "" {
			if f, err := strconv.ParseFloat(v.value, 64); err == nil {
				return f, nil
			}
		}
	}
	if v.kind == scalarNode && !v.null {
		return 0, d.errorf(v.pos, "%s must be a number like 2 or 0.5, not %q", key, v.value)
	}
	return 0, d.errorf(v.pos, "%s must be a number like 2 or 0.5", key)
}

// size decodes a size of at least min bytes.
func (d *decoder) size(v *node, key string, min int64, minText string) (*string, error) {
	s, err := d.scalar(v, key)
	if err != nil {
		return nil, err
	}
	if n, err := units.ParseSize(s); checkSize(s) != "" || err != nil || n < min {
		return nil, d.errorf(v.pos, "invalid %s %q: use a size of at least %s, like 512m or 2g", key, s, minText)
	}
	return &s, nil
}

// anyString accepts every value.
func anyString(string) string { return "" }
