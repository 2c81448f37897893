"""collect (stage: collect): transports (SSH, local, HTTP) and the collectors that fill a probe bundle."""
