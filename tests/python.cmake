# The Python package (python/) and its pytest suite against a real daemon
# started from the build tree. Skips (77) only when its dependencies cannot
# be installed from PyPI (no network).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME python_package
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_python_package.sh
            $<TARGET_FILE:tsdfd> ${PROJECT_SOURCE_DIR} ${Python3_EXECUTABLE}
            $<TARGET_FILE:depth_codec_tool>)
  set_tests_properties(python_package PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
endif()
