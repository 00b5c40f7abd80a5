#include <stddef.h>
#include <stdio.h>
#include "php.h"
#include "zend_compile.h"
#include "zend_globals.h"
#define P(s,f) printf("%-40s %zu\n", #s "." #f, offsetof(s,f))
int main(){
P(zend_executor_globals, current_execute_data);
P(zend_execute_data, opline); P(zend_execute_data, func); P(zend_execute_data, This); P(zend_execute_data, prev_execute_data);
printf("This.u1.type_info %zu\n", offsetof(zend_execute_data, This) + offsetof(zval, u1.type_info));
printf("sizeof execute_data %zu\n", sizeof(zend_execute_data));
P(zend_function, type); P(zend_function, common.function_name); P(zend_function, common.scope); P(zend_function, common.fn_flags);
P(zend_op_array, opcodes); P(zend_op_array, filename); P(zend_op_array, line_start); P(zend_op_array, line_end); P(zend_op_array, num_args); P(zend_op_array, last);
P(zend_op, lineno); printf("sizeof zend_op %zu\n", sizeof(zend_op));
P(zend_class_entry, name); P(zend_string, len); P(zend_string, val);
printf("ZEND_CALL_TOP %x ZEND_USER_FUNCTION %d ZEND_INTERNAL_FUNCTION %d ZEND_EVAL_CODE %d ZEND_ACC_CLOSURE %x\n", ZEND_CALL_TOP, ZEND_USER_FUNCTION, ZEND_INTERNAL_FUNCTION, ZEND_EVAL_CODE, ZEND_ACC_CLOSURE);
printf("ZEND_CALL_CODE %x ZEND_CALL_NESTED %x ZEND_CALL_FUNCTION %x\n", ZEND_CALL_CODE, ZEND_CALL_NESTED, ZEND_CALL_FUNCTION);
P(zend_internal_function, function_name); P(zend_internal_function, module);
#ifdef ZTS
puts("ZTS");
#endif
}
