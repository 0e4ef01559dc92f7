"""Where memory comes from: devices, memory sources (host, CUDA, torch, pinned), the
counted ledger every allocation goes through, and the CUDA graph capture probe."""
