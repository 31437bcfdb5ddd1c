#!/bin/sh
# session 25 call 6: device_run.sh at 192110c (libpi0 as 45f07de): test_cuda --full, every workload with graphs on and off
OUT=$1; export LD_LIBRARY_PATH=$PWD/build-carry/F/lib
BUILD=build-carry/F sh build-carry/device_run.sh $OUT
