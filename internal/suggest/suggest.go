// Package suggest finds the known key a misspelt one was meant to be, for
// "did you mean" in error messages.
package suggest

import "strings"

// Closest returns the known key nearest to key by edit distance (ignoring
// case), or "" when none is near enough to be a plausible typo.
func Closest(key string, known []string) string {
	best, bestDist := "", -1
	lk := strings.ToLower(key)
	for _, k := range known {
		d := editDistance(lk, strings.ToLower(k))
		if bestDist < 0 || d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	limit := max(2, min(len(key), len(best))/3)
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
