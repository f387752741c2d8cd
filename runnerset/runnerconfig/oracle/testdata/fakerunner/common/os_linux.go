package common

type OSOnly struct {
	Linux string `toml:"linux"`
}
