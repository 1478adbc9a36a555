// Package suggest finds what a mistyped word was meant to be: the
// "did you mean" of flags, commands, config keys and capability names.
package suggest

// Distance is the Levenshtein distance between a and b, in bytes; words
// over 64 bytes count as 64 apart (nobody mistypes those into each other).
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	var rowBuf [65]int
	row := rowBuf[:len(b)+1]
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		prev := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			cur := row[j]
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			row[j] = min(row[j]+1, row[j-1]+1, prev+cost)
			prev = cur
		}
	}
	return row[len(b)]
}
