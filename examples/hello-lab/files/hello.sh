#!/bin/sh
# The student makes this executable (`chmod +x ~/hello.sh`) and runs it.
echo "Hello from $(id -un)"
