package sqlstore

import "testing"

func TestInterpolationSafe(t *testing.T) {
	for dsn, want := range map[string]bool{
		"mysql://root@tcp(127.0.0.1:3306)/db":                         true,
		"mysql://root@tcp(127.0.0.1:3306)/db?charset=utf8mb4":         true,
		"mysql://root@tcp(127.0.0.1:3306)/db?charset=utf8&timeout=5s": true,
		"mysql://root@tcp(127.0.0.1:3306)/db?charset=gbk":             false,
		"mysql://root@tcp(127.0.0.1:3306)/db?charset=utf8mb4,sjis":    false,
		"mysql://u:p?charset=gbk@tcp(127.0.0.1:3306)/db":              true,
		"mysql://u:p@tcp(127.0.0.1:3306)/db?charset=big5":             false,
	} {
		if got := interpolationSafe(dsn); got != want {
			t.Errorf("interpolationSafe(%q) = %v, want %v", dsn, got, want)
		}
	}
}
