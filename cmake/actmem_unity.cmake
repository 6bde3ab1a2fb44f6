# actmem_unity_build(TARGET ROOT): compiles the library target's sources as a unity build, in
# batches of 10, which halves the compiler's time on 2 cores (the quick start's binary: 126 s of
# CPU -> 67 s; the web page's WebAssembly build likewise). Used by the top-level CMakeLists.txt
# (ACTMEM_UNITY: the quick-start and sanitizer presets) and by web/CMakeLists.txt.
#
# The sources below each keep their own rule tables under the same names as another's (Use,
# KeyRule, kKeys, find_key, Row, kRows, Setter, kInfos; the caching allocator's sizes named as in
# c10, kMinBlockSize, kLargeBuffer, kMiB, Block) in an anonymous namespace, so they compile alone.
# CI's sanitizer build and web build compile this way: a new clash fails there.
function(actmem_unity_build target root)
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 10)
  set(alone config/deepspeed_config.cc config/hf_trainer_config.cc config/megatron_args.cc
            config/torchtitan_config.cc planner/plan_options.cc policies/finetune.cc policies/grad_accum.cc
            runtime/allocator_config.cc runtime/caching_allocator.cc)
  list(TRANSFORM alone PREPEND ${root}/src/)
  set_source_files_properties(${alone} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endfunction()
