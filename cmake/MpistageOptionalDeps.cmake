# Checks of the optional dependencies' options (included by the top-level CMakeLists.txt).
include_guard(GLOBAL)

# mpistage_check_required(<NAME> <with_option> <require_option>): a feature that is required
# must also be enabled; anything else is a contradiction the user must resolve.
function(mpistage_check_required name with_option require_option)
  if(${require_option} AND NOT ${with_option})
    message(FATAL_ERROR
      "mpistage: ${require_option}=ON asks for ${name} but ${with_option}=OFF turns it off; "
      "set ${with_option}=ON (or ${require_option}=OFF).")
  endif()
endfunction()
