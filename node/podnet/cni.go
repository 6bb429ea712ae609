package podnet

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// ConfigFile is the conflist's name in the CNI configuration directory.
const ConfigFile = "10-sqlkube.conflist"

// NetworkName is the CNI network's name: the runtime's CNI result cache
// and the portmap plugin's rules name it.
const NetworkName = "sqlkube"

// WriteCNIConfig writes the node's pod network for the runtime: a bridge
// (BridgeName) with host-local addresses from podCIDR, the pods' default
// route through it, and port mappings. The file is replaced in one rename,
// since the runtime watches the directory.
func WriteCNIConfig(confDir, ipamDir, podCIDR string) error {
	if _, _, err := net.ParseCIDR(podCIDR); err != nil {
		return fmt.Errorf("pod CIDR: %w", err)
	}
	if err := os.MkdirAll(confDir, 0o700); err != nil {
		return err
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": BridgeName(podCIDR), "isGateway": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": ipamDir,
					"ranges": [][]map[string]string{{{"subnet": podCIDR}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(confDir, ConfigFile)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ConfiguredPodCIDR is the pod CIDR of the conflist WriteCNIConfig wrote
// in confDir (an error wrapping fs.ErrNotExist when there is none).
func ConfiguredPodCIDR(confDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(confDir, ConfigFile))
	if err != nil {
		return "", err
	}
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return "", fmt.Errorf("%s: %w", ConfigFile, err)
	}
	for _, p := range conf.Plugins {
		if p.Type == "bridge" && len(p.IPAM.Ranges) > 0 && len(p.IPAM.Ranges[0]) > 0 {
			return p.IPAM.Ranges[0][0].Subnet, nil
		}
	}
	return "", fmt.Errorf("%s: no bridge network with a subnet", ConfigFile)
}
