package oracle

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/gorhill/cronexpr"
	"github.com/robfig/cron/v3"
)

// Values checks the values of a config.toml that gitlab-runner parses when
// it starts or when it first uses them: the key oracle (Schema.Check) knows
// that [[runners]] executor is a string, Values knows which strings
// gitlab-runner has an executor for. The enums are read from the same
// gitlab-runner source the Schema was (Schema.ModuleDir), the parsers are
// the ones gitlab-runner and fleeting use:
//
//   - executor: the keys of newExecutorProviders in main.go;
//   - cache Type: every cache.Factories().Register("…") under cache/;
//   - log_format: the Format* constants of log/configuration.go, log_level
//     the options its log-level flag and common.Config's log_level list;
//   - shell: every shell registered under shells/ (their Shell names);
//   - [[runners.machine.autoscaling]] Periods: github.com/gorhill/cronexpr,
//     the parser of gitlab-runner's helpers/timeperiod, which counts a
//     period as active only within a second of the expression's next match:
//     a period must have 7 fields (seconds first) and "*" seconds, or it is
//     active for one second a minute;
//   - [[runners.monitoring.job_queuing_durations]] periods: the same
//     helpers/timeperiod as docker+machine's, so the same rules; its
//     threshold is a duration above 0 (gitlab-runner counts nothing
//     otherwise), its jobs_running_for_project a Go regular expression
//     (gitlab-runner refuses to load the config with an invalid one);
//   - [[runners.autoscaler.policy]] periods: fleeting's taskscaler reads
//     5-field unix cron (minute hour day-of-month month day-of-week). Its
//     parser's module is not served here; these are checked with
//     github.com/robfig/cron/v3's parser restricted to those five fields,
//     no descriptors, and a 6- or 7-field expression is refused by name;
//   - durations (idle_time, connector timeouts, shutdown_drain
//     retry_backoff): time.ParseDuration, as BurntSushi/toml decodes a
//     string into a time.Duration; an autoscaler policy's idle_time is at
//     least 1s (its jsonschema minimum in common/config.go);
//   - MachineOptions of the google driver: GoogleDriverFlags;
//   - [[runners]] limit: gitlab-runner's acquireBuild
//     (commands/builds_helper.go) counts a runner's jobs against its limit
//     only when the limit is above 0, so 0 or below is no limit at all: a
//     limit is at least 1 (omit the key for no limit). The rule is read
//     from that source: ValuesFromDir fails if it changed.
type Values struct {
	Executors  []string
	CacheTypes []string
	LogFormats []string
	LogLevels  []string
	Shells     []string
}

// Values reads the enums from the schema's gitlab-runner source.
func (s *Schema) Values() (*Values, error) {
	return ValuesFromDir(s.ModuleDir)
}

var (
	executorKeyRE   = regexp.MustCompile(`(?m)^\s*("([^"]+)"|common\.(Executor\w+)):\s+\S`)
	cacheRegisterRE = regexp.MustCompile(`cache\.Factories\(\)\.Register\("([^"]+)"`)
	logFormatRE     = regexp.MustCompile(`(?m)^\s*Format\w+\s*=\s*"([^"]+)"`)
	logLevelsRE     = regexp.MustCompile(`[Ll]og level \((?:options|one of): ([a-z, ]+)\)`)
	// limitRuleRE is acquireBuild's test of a runner's limit.
	limitRuleRE = regexp.MustCompile(`runner\.Limit > 0 && counter\.builds >= runner\.Limit`)
	shellNameRE = regexp.MustCompile(`(?m)^\s*(SN\w+)\s*=\s*"([^"]+)"|BashShell\{Shell: "([^"]+)"\}`)
)

// ValuesFromDir reads the enums from gitlab-runner's source in dir.
func ValuesFromDir(dir string) (*Values, error) {
	read := func(rel string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return "", fmt.Errorf("oracle: reading gitlab-runner's %s: %w", rel, err)
		}
		return string(b), nil
	}
	v := &Values{}
	mainGo, err := read("main.go")
	if err != nil {
		return nil, err
	}
	consts, err := read("common/consts.go")
	if err != nil {
		return nil, err
	}
	if i := strings.Index(mainGo, "func newExecutorProviders"); i >= 0 {
		body := mainGo[i:]
		if end := strings.Index(body, "\n}\n"); end >= 0 {
			body = body[:end]
		}
		for _, m := range executorKeyRE.FindAllStringSubmatch(body, -1) {
			name := m[2]
			if m[3] != "" {
				c := regexp.MustCompile(`(?m)^\s*` + m[3] + `\s*=\s*"([^"]+)"`).FindStringSubmatch(consts)
				if c == nil {
					return nil, fmt.Errorf("oracle: common.%s not found in gitlab-runner's common/consts.go", m[3])
				}
				name = c[1]
			}
			v.Executors = append(v.Executors, name)
		}
	}
	err = filepath.WalkDir(filepath.Join(dir, "cache"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "test" {
			return filepath.SkipDir // the test adapters gitlab-runner's tests register
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range cacheRegisterRE.FindAllStringSubmatch(string(b), -1) {
			v.CacheTypes = append(v.CacheTypes, m[1])
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("oracle: reading gitlab-runner's cache adapters: %w", err)
	}
	logCfg, err := read("log/configuration.go")
	if err != nil {
		return nil, err
	}
	configGo, err := read("common/config.go")
	if err != nil {
		return nil, err
	}
	for _, m := range logFormatRE.FindAllStringSubmatch(logCfg, -1) {
		v.LogFormats = append(v.LogFormats, m[1])
	}
	// The levels the log-level flag lists and the ones config.toml's
	// log_level field describes (logrus.ParseLevel takes both spellings).
	for _, src := range []string{logCfg, configGo} {
		for _, m := range logLevelsRE.FindAllStringSubmatch(src, -1) {
			for _, l := range strings.Split(m[1], ",") {
				v.LogLevels = append(v.LogLevels, strings.TrimSpace(l))
			}
		}
	}
	for _, f := range []string{"shells/bash.go", "shells/powershell.go"} {
		src, err := read(f)
		if err != nil {
			return nil, err
		}
		for _, m := range shellNameRE.FindAllStringSubmatch(src, -1) {
			if m[2] != "" {
				v.Shells = append(v.Shells, m[2])
			} else {
				v.Shells = append(v.Shells, m[3])
			}
		}
	}
	builds, err := read("commands/builds_helper.go")
	if err != nil {
		return nil, err
	}
	if !limitRuleRE.MatchString(builds) {
		return nil, errors.New("oracle: gitlab-runner's commands/builds_helper.go acquireBuild no longer tests runner.Limit > 0 && counter.builds >= runner.Limit: read how it counts [[runners]] limit now and update the limit check")
	}
	for _, l := range []*[]string{&v.Executors, &v.CacheTypes, &v.LogFormats, &v.LogLevels, &v.Shells} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	switch {
	case len(v.Executors) == 0:
		return nil, errors.New("oracle: no executor found in gitlab-runner's main.go newExecutorProviders")
	case len(v.CacheTypes) == 0:
		return nil, errors.New("oracle: no cache adapter registered under gitlab-runner's cache/")
	case len(v.LogFormats) == 0 || len(v.LogLevels) == 0:
		return nil, errors.New("oracle: no log format or level in gitlab-runner's log/configuration.go")
	case len(v.Shells) == 0:
		return nil, errors.New("oracle: no shell registered under gitlab-runner's shells/")
	}
	return v, nil
}

// Check decodes configTOML as gitlab-runner does and checks its values;
// every problem is a *Problem (see Problems) naming the key.
func (v *Values) Check(configTOML []byte) error {
	var doc map[string]any
	if _, err := toml.Decode(string(configTOML), &doc); err != nil {
		return fmt.Errorf("oracle: config.toml does not parse: %w", err)
	}
	c := &checker{}
	enum := func(p string, val any, allowed []string) {
		s, ok := val.(string)
		if !ok {
			return // the key oracle reports wrong types
		}
		if !slices.Contains(allowed, s) {
			c.add(p, "%q is not one of gitlab-runner's %s", s, strings.Join(allowed, ", "))
		}
	}
	if f, ok := doc["log_format"]; ok {
		enum("log_format", f, v.LogFormats)
	}
	if l, ok := doc["log_level"]; ok {
		enum("log_level", l, v.LogLevels)
	}
	if n, ok := doc["concurrent"].(int64); ok && n < 1 {
		c.add("concurrent", "%d: gitlab-runner runs no job with concurrent below 1", n)
	}
	if a, ok := doc["listen_address"].(string); ok {
		hostPort(c, "listen_address", a)
	}
	if n, ok := doc["shutdown_timeout"].(int64); ok && n < 0 {
		c.add("shutdown_timeout", "%d: seconds, not negative", n)
	}
	if s, ok := doc["session_server"].(map[string]any); ok {
		for _, k := range []string{"listen_address", "advertise_address"} {
			if a, ok := s[k].(string); ok {
				hostPort(c, "session_server."+k, a)
			}
		}
	}
	if m, ok := doc["machine"].(map[string]any); ok {
		if d, ok := m["shutdown_drain"].(map[string]any); ok {
			duration(c, "machine.shutdown_drain.retry_backoff", d["retry_backoff"], 0)
			for _, k := range []string{"concurrency", "max_retries"} {
				if n, ok := d[k].(int64); ok && n < 0 {
					c.add("machine.shutdown_drain."+k, "%d must not be negative", n)
				}
			}
		}
	}
	runners, _ := arrayItems(doc["runners"])
	for i, r := range runners {
		rm, ok := r.(map[string]any)
		if !ok {
			continue
		}
		p := fmt.Sprintf("runners[%d]", i)
		if e, ok := rm["executor"]; ok {
			enum(p+".executor", e, v.Executors)
		}
		if s, ok := rm["shell"]; ok {
			enum(p+".shell", s, v.Shells)
		}
		if n, ok := rm["limit"].(int64); ok && n < 1 {
			c.add(p+".limit", "%d: gitlab-runner counts a runner's jobs against its limit only above 0 (acquireBuild), so this runner takes jobs without any limit; give at least 1, or omit the key for no limit", n)
		}
		if cm, ok := rm["cache"].(map[string]any); ok {
			if t, ok := cm["Type"]; ok {
				enum(p+".cache.Type", t, v.CacheTypes)
			}
		}
		if mm, ok := rm["machine"].(map[string]any); ok {
			checkMachine(c, p+".machine", mm)
		}
		if am, ok := rm["autoscaler"].(map[string]any); ok {
			checkAutoscaler(c, p+".autoscaler", am)
		}
		if mm, ok := rm["monitoring"].(map[string]any); ok {
			checkQueuingDurations(c, p+".monitoring.job_queuing_durations", mm["job_queuing_durations"])
		}
	}
	if len(c.problems) == 0 {
		return nil
	}
	sort.SliceStable(c.problems, func(i, j int) bool {
		return c.problems[i].(*Problem).Path < c.problems[j].(*Problem).Path
	})
	return errors.Join(c.problems...)
}

func hostPort(c *checker, p, a string) {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		c.add(p, "%q is not host:port (%v)", a, err)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		c.add(p, "%q: port %q is not 1 to 65535", a, port)
	}
}

// duration checks a time.Duration value as BurntSushi/toml decodes it (a
// string through time.ParseDuration, or an integer of nanoseconds).
func duration(c *checker, p string, v any, minimum time.Duration) {
	var d time.Duration
	switch x := v.(type) {
	case nil:
		return
	case string:
		var err error
		if d, err = time.ParseDuration(x); err != nil {
			c.add(p, "%q is not a duration such as 30m (%v)", x, err)
			return
		}
	case int64:
		d = time.Duration(x)
	default:
		return // the key oracle reports wrong types
	}
	if d < minimum {
		c.add(p, "%s is below gitlab-runner's minimum of %s", d, minimum)
	}
}

func timezone(c *checker, p string, v any) {
	if tz, ok := v.(string); ok && tz != "" {
		if _, err := time.LoadLocation(tz); err != nil {
			c.add(p, "%q is not a time zone such as Europe/Berlin", tz)
		}
	}
}

// MachinePeriod checks one [[runners.machine.autoscaling]] Periods entry
// as gitlab-runner's helpers/timeperiod reads it.
func MachinePeriod(expr string) error { return timePeriod(expr, "docker+machine") }

// QueuingPeriod checks one [[runners.monitoring.job_queuing_durations]]
// periods entry, read by the same helpers/timeperiod.
func QueuingPeriod(expr string) error { return timePeriod(expr, "job_queuing_durations") }

func timePeriod(expr, what string) error {
	if _, err := cronexpr.Parse(expr); err != nil {
		return fmt.Errorf("%q is not a cron expression (%v)", expr, err)
	}
	fields := strings.Fields(expr)
	if len(fields) != 7 {
		return fmt.Errorf("%q has %d fields; "+what+" periods have 7 (seconds minutes hours days months weekdays years), such as \"* * 9-17 * * mon-fri *\": with fewer, gitlab-runner's period is active only in second 0 of a minute", expr, len(fields))
	}
	if fields[0] != "*" {
		return fmt.Errorf("%q: the seconds field must be \"*\": gitlab-runner counts a period as active only within a second of its next match, so %q seconds make it active for moments", expr, fields[0])
	}
	return nil
}

var policyParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// PolicyPeriod checks one [[runners.autoscaler.policy]] periods entry:
// 5-field unix cron, as fleeting's taskscaler reads it.
func PolicyPeriod(expr string) error {
	if n := len(strings.Fields(expr)); n != 5 {
		return fmt.Errorf("%q has %d fields; docker-autoscaler policy periods are 5-field unix cron (minute hour day-of-month month day-of-week), such as \"* 7-19 * * mon-fri\"", expr, n)
	}
	if _, err := policyParser.Parse(expr); err != nil {
		return fmt.Errorf("%q is not a 5-field cron expression (%v)", expr, err)
	}
	return nil
}

func checkQueuingDurations(c *checker, p string, v any) {
	entries, _ := arrayItems(v)
	for i, e := range entries {
		em, ok := e.(map[string]any)
		if !ok {
			continue
		}
		ep := fmt.Sprintf("%s[%d]", p, i)
		periods, _ := arrayItems(em["periods"])
		if len(periods) == 0 {
			c.add(ep+".periods", "an entry without periods never applies")
		}
		for j, x := range periods {
			if s, ok := x.(string); ok {
				if err := QueuingPeriod(s); err != nil {
					c.add(fmt.Sprintf("%s.periods[%d]", ep, j), "%v", err)
				}
			}
		}
		timezone(c, ep+".timezone", em["timezone"])
		switch th := em["threshold"].(type) {
		case nil:
			c.add(ep+".threshold", "is required: gitlab-runner counts no job without a threshold above 0")
		case string:
			if d, err := time.ParseDuration(th); err != nil {
				c.add(ep+".threshold", "%q is not a duration such as 5m (%v)", th, err)
			} else if d <= 0 {
				c.add(ep+".threshold", "%s: gitlab-runner counts no job with a threshold of 0 or below", d)
			}
		case int64:
			if th <= 0 {
				c.add(ep+".threshold", "%d: gitlab-runner counts no job with a threshold of 0 or below", th)
			}
		}
		if rx, ok := em["jobs_running_for_project"].(string); ok {
			if _, err := regexp.Compile(rx); err != nil {
				c.add(ep+".jobs_running_for_project", "%q is not a Go regular expression (%v): gitlab-runner does not load the config", rx, err)
			}
		}
	}
}

func checkMachine(c *checker, p string, m map[string]any) {
	driver, _ := m["MachineDriver"].(string)
	if driver == "" {
		c.add(p+".MachineDriver", "is required: docker+machine creates no VM without a driver")
	}
	if name, ok := m["MachineName"].(string); ok && strings.Count(name, "%s") != 1 {
		c.add(p+".MachineName", "%q must hold %%s exactly once (gitlab-runner puts each VM's unique part there)", name)
	}
	if n, ok := m["IdleTime"].(int64); ok && n < 0 {
		c.add(p+".IdleTime", "%d: seconds, not negative", n)
	}
	if opts, ok := arrayItems(m["MachineOptions"]); ok && driver == "google" {
		var list []string
		for _, o := range opts {
			if s, ok := o.(string); ok {
				list = append(list, s)
			}
		}
		for _, pr := range CheckGoogleMachineOptions(list) {
			c.add(fmt.Sprintf("%s.MachineOptions[%d]", p, pr.Index), "%s", pr.Message)
		}
	}
	as, _ := arrayItems(m["autoscaling"])
	for i, a := range as {
		am, ok := a.(map[string]any)
		if !ok {
			continue
		}
		ap := fmt.Sprintf("%s.autoscaling[%d]", p, i)
		periods, _ := arrayItems(am["Periods"])
		if len(periods) == 0 {
			c.add(ap+".Periods", "an autoscaling entry without periods never applies")
		}
		for j, e := range periods {
			if s, ok := e.(string); ok {
				if err := MachinePeriod(s); err != nil {
					c.add(fmt.Sprintf("%s.Periods[%d]", ap, j), "%v", err)
				}
			}
		}
		timezone(c, ap+".Timezone", am["Timezone"])
		if n, ok := am["IdleTime"].(int64); ok && n < 0 {
			c.add(ap+".IdleTime", "%d: seconds, not negative", n)
		}
	}
}

// Connector protocols and operating systems of fleeting's connector.
var (
	connectorProtocols = []string{"ssh", "winrm"}
	connectorOS        = []string{"darwin", "linux", "windows"}
)

func checkAutoscaler(c *checker, p string, a map[string]any) {
	if plugin, _ := a["plugin"].(string); plugin == "" {
		c.add(p+".plugin", "is required: the fleeting plugin that provides the instances")
	}
	if n, ok := a["max_instances"].(int64); ok && n < 1 {
		c.add(p+".max_instances", "%d: docker-autoscaler creates no instance below 1", n)
	}
	if n, ok := a["capacity_per_instance"].(int64); ok && n < 1 {
		c.add(p+".capacity_per_instance", "%d must be at least 1", n)
	}
	if cc, ok := a["connector_config"].(map[string]any); ok {
		cp := p + ".connector_config"
		if s, ok := cc["protocol"].(string); ok && !slices.Contains(connectorProtocols, s) {
			c.add(cp+".protocol", "%q is not one of %s", s, strings.Join(connectorProtocols, ", "))
		}
		if s, ok := cc["os"].(string); ok && !slices.Contains(connectorOS, s) {
			c.add(cp+".os", "%q is not one of %s", s, strings.Join(connectorOS, ", "))
		}
		if n, ok := cc["protocol_port"].(int64); ok && (n < 1 || n > 65535) {
			c.add(cp+".protocol_port", "%d is not a port", n)
		}
		duration(c, cp+".timeout", cc["timeout"], 0)
		duration(c, cp+".keepalive", cc["keepalive"], 0)
	}
	policies, _ := arrayItems(a["policy"])
	for i, pol := range policies {
		pm, ok := pol.(map[string]any)
		if !ok {
			continue
		}
		pp := fmt.Sprintf("%s.policy[%d]", p, i)
		periods, _ := arrayItems(pm["periods"])
		for j, e := range periods {
			if s, ok := e.(string); ok {
				if err := PolicyPeriod(s); err != nil {
					c.add(fmt.Sprintf("%s.periods[%d]", pp, j), "%v", err)
				}
			}
		}
		timezone(c, pp+".timezone", pm["timezone"])
		duration(c, pp+".idle_time", pm["idle_time"], time.Second)
	}
}
