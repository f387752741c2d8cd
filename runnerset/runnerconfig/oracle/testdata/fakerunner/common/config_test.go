package common

type Config struct {
	FromTestFile string `toml:"from_test_file"`
}
