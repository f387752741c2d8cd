// Package credentials lives in a directory of another name, so the walker has
// to read its package clause to resolve credentials.Creds.
package credentials

type Creds struct {
	Host string `toml:"host"`
	Mode Mode   `toml:"mode"`
}

type Mode string
