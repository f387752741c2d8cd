package common

type OSOnly struct {
	Windows string `toml:"windows"`
}
