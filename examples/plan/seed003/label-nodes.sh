#!/bin/sh
# Written by `gpu-policy plan`: point each GPU node at its device-plugin config key.
# Apply device-plugin-config.yaml first; restart the device plugin after labelling.
set -eu
# NVIDIA-L20: nvidia.com/gpu x 8 per device
kubectl label node 10.0.2.11 nvidia.com/device-plugin.config=nvidia-l20 --overwrite
# Tesla-T4: nvidia.com/gpu x 3 per device
kubectl label node 10.0.2.12 nvidia.com/device-plugin.config=tesla-t4 --overwrite
