package manager

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

// FileConfig is the Manager's config.yaml. Every field is optional; flags
// given on the command line win over the file.
type FileConfig struct {
	NodeName          string   `json:"nodeName,omitempty"`
	DataDir           string   `json:"dataDir,omitempty"`
	Listen            string   `json:"listen,omitempty"`
	AdvertiseURL      string   `json:"advertiseUrl,omitempty"`
	LostGrace         Duration `json:"lostGrace,omitempty"`
	HeartbeatInterval Duration `json:"heartbeatInterval,omitempty"`
	DefaultIdleExpiry Duration `json:"defaultIdleExpiry,omitempty"`
	SnapshotThreshold uint64   `json:"snapshotThreshold,omitempty"`
	EventBuffer       int      `json:"eventBuffer,omitempty"`
	BackupDir         string   `json:"backupDir,omitempty"`
	BackupInterval    Duration `json:"backupInterval,omitempty"`
	BackupRetain      int      `json:"backupRetain,omitempty"`
	// AccessReplicaKeys is the JWKS file of the access replica's trusted
	// keys (--access-replica-keys).
	AccessReplicaKeys string `json:"accessReplicaKeys,omitempty"`
	// TLS is auto, on or off; the rest are Config's TLS fields.
	TLS          string   `json:"tls,omitempty"`
	TLSCertFile  string   `json:"tlsCertFile,omitempty"`
	TLSKeyFile   string   `json:"tlsKeyFile,omitempty"`
	TLSCAFile    string   `json:"tlsCaFile,omitempty"`
	TLSCAKeyFile string   `json:"tlsCaKeyFile,omitempty"`
	TLSDir       string   `json:"tlsDir,omitempty"`
	TLSHosts     []string `json:"tlsHosts,omitempty"`
	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string `json:"logLevel,omitempty"`
	LogFormat string `json:"logFormat,omitempty"`
}

// Duration is a time.Duration written as "30s", "5m" in the file.
type Duration struct{ time.Duration }

// UnmarshalJSON reads "30s" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		d.Duration = v
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %s", b)
	}
	d.Duration = time.Duration(n)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// LoadConfigFile reads a config.yaml; unknown keys are an error naming them.
func LoadConfigFile(path string) (FileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, fmt.Errorf("config file: %w", err)
	}
	fc, err := ParseConfigFile(b)
	if err != nil {
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	return fc, nil
}

// ParseConfigFile decodes a config.yaml's contents strictly.
func ParseConfigFile(b []byte) (FileConfig, error) {
	var fc FileConfig
	if err := yaml.UnmarshalStrict(b, &fc); err != nil {
		return FileConfig{}, err
	}
	return fc, nil
}

// Apply copies the file's settings into cfg where cfg has none.
func (fc FileConfig) Apply(cfg *Config) {
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v Duration) {
		if *dst == 0 {
			*dst = v.Duration
		}
	}
	set(&cfg.NodeName, fc.NodeName)
	set(&cfg.DataDir, fc.DataDir)
	set(&cfg.Listen, fc.Listen)
	set(&cfg.AdvertiseURL, fc.AdvertiseURL)
	setD(&cfg.LostGrace, fc.LostGrace)
	setD(&cfg.HeartbeatInterval, fc.HeartbeatInterval)
	setD(&cfg.DefaultIdleExpiry, fc.DefaultIdleExpiry)
	if cfg.SnapshotThreshold == 0 {
		cfg.SnapshotThreshold = fc.SnapshotThreshold
	}
	if cfg.EventBuffer == 0 {
		cfg.EventBuffer = fc.EventBuffer
	}
	set(&cfg.BackupDir, fc.BackupDir)
	set(&cfg.TLS, fc.TLS)
	set(&cfg.TLSCertFile, fc.TLSCertFile)
	set(&cfg.TLSKeyFile, fc.TLSKeyFile)
	set(&cfg.TLSCAFile, fc.TLSCAFile)
	set(&cfg.TLSCAKeyFile, fc.TLSCAKeyFile)
	set(&cfg.TLSDir, fc.TLSDir)
	if len(cfg.TLSHosts) == 0 {
		cfg.TLSHosts = fc.TLSHosts
	}
	set(&cfg.AccessReplicaKeysFile, fc.AccessReplicaKeys)
	setD(&cfg.BackupInterval, fc.BackupInterval)
	if cfg.BackupRetain == 0 {
		cfg.BackupRetain = fc.BackupRetain
	}
}
