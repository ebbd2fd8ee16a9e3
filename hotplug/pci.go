package hotplug

import (
	"encoding/json"
	"fmt"
)

// PCIAddress is where a device sits as QEMU's query-pci reports it. The
// bus number is the one the guest's firmware gave the bus (0 for the
// root bus).
type PCIAddress struct {
	Bus      int `json:"bus"`
	Slot     int `json:"slot"`
	Function int `json:"function"`
}

// String is lspci's bus:slot.function.
func (a PCIAddress) String() string { return fmt.Sprintf("%02x:%02x.%x", a.Bus, a.Slot, a.Function) }

// PCIDevice is one device from query-pci.
type PCIDevice struct {
	Address  PCIAddress `json:"address"`
	VendorID uint16     `json:"vendor_id"`
	DeviceID uint16     `json:"device_id"`
	QdevID   string     `json:"qdev_id"`
}

type pciInfo struct {
	Bus     int      `json:"bus"`
	Devices []pciDev `json:"devices"`
}

type pciDev struct {
	Bus      int    `json:"bus"`
	Slot     int    `json:"slot"`
	Function int    `json:"function"`
	QdevID   string `json:"qdev_id"`
	ID       struct {
		Vendor int `json:"vendor"`
		Device int `json:"device"`
	} `json:"id"`
	Bridge *struct {
		Devices []pciDev `json:"devices"`
	} `json:"pci_bridge"`
}

// findPCI looks for the device with qdev id in a query-pci return value,
// on every bus and behind every bridge. QEMU lists what is behind a
// bridge only once the guest's firmware has numbered the bridge's bus,
// so a device behind a root port of a guest that has not booted is not
// found.
func findPCI(ret json.RawMessage, id string) (PCIDevice, bool, error) {
	var buses []pciInfo
	if err := json.Unmarshal(ret, &buses); err != nil {
		return PCIDevice{}, false, fmt.Errorf("%w: query-pci: %v", ErrProtocol, err)
	}
	for _, b := range buses {
		if d, ok, err := findPCIDev(b.Devices, id); ok || err != nil {
			return d, ok, err
		}
	}
	return PCIDevice{}, false, nil
}

func findPCIDev(devs []pciDev, id string) (PCIDevice, bool, error) {
	for _, d := range devs {
		if d.QdevID == id {
			if d.Bus < 0 || d.Bus > 255 || d.Slot < 0 || d.Slot > 31 || d.Function < 0 || d.Function > 7 ||
				d.ID.Vendor < 0 || d.ID.Vendor > 0xffff || d.ID.Device < 0 || d.ID.Device > 0xffff {
				return PCIDevice{}, false, fmt.Errorf("%w: query-pci: %s at %d:%d.%d id %#x:%#x is out of range",
					ErrProtocol, id, d.Bus, d.Slot, d.Function, d.ID.Vendor, d.ID.Device)
			}
			return PCIDevice{
				Address:  PCIAddress{Bus: d.Bus, Slot: d.Slot, Function: d.Function},
				VendorID: uint16(d.ID.Vendor),
				DeviceID: uint16(d.ID.Device),
				QdevID:   d.QdevID,
			}, true, nil
		}
		if d.Bridge != nil {
			if r, ok, err := findPCIDev(d.Bridge.Devices, id); ok || err != nil {
				return r, ok, err
			}
		}
	}
	return PCIDevice{}, false, nil
}
