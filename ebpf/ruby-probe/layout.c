#include "ruby/ruby.h"
#include "vm_core.h"
#include "iseq.h"
#include <stddef.h>
#include <stdio.h>
#define P(s,f) printf("%-45s %zu\n", #s "." #f, offsetof(s,f))
int main(){
P(rb_execution_context_t, vm_stack); P(rb_execution_context_t, vm_stack_size); P(rb_execution_context_t, cfp);
printf("sizeof cfp %zu\n", sizeof(rb_control_frame_t));
P(rb_control_frame_t, pc); P(rb_control_frame_t, sp); P(rb_control_frame_t, iseq); P(rb_control_frame_t, self); P(rb_control_frame_t, ep);
P(rb_iseq_t, body);
P(struct rb_iseq_constant_body, type); P(struct rb_iseq_constant_body, iseq_size); P(struct rb_iseq_constant_body, iseq_encoded);
P(struct rb_iseq_constant_body, location.pathobj); P(struct rb_iseq_constant_body, location.base_label); P(struct rb_iseq_constant_body, location.label); P(struct rb_iseq_constant_body, location.first_lineno);
P(struct rb_iseq_constant_body, insns_info.body); P(struct rb_iseq_constant_body, insns_info.positions); P(struct rb_iseq_constant_body, insns_info.size); P(struct rb_iseq_constant_body, insns_info.succ_index_table);
printf("sizeof insn_info_entry %zu line_no %zu\n", sizeof(struct iseq_insn_info_entry), offsetof(struct iseq_insn_info_entry, line_no));
P(rb_vm_t, ractor.main_thread); P(rb_thread_t, ec); P(rb_thread_t, thread_id);
P(struct RString, as.heap.len); P(struct RString, as.heap.ptr); P(struct RString, as.embed.ary);
printf("RSTRING_NOEMBED %lx RSTRING_EMBED_LEN_MASK %lx SHIFT %d\n", (unsigned long)RSTRING_NOEMBED, (unsigned long)RSTRING_EMBED_LEN_MASK, RSTRING_EMBED_LEN_SHIFT);
printf("RARRAY_EMBED_FLAG %lx len mask %lx shift %d\n", (unsigned long)RARRAY_EMBED_FLAG, (unsigned long)RARRAY_EMBED_LEN_MASK, RARRAY_EMBED_LEN_SHIFT);
P(struct RArray, as.heap.ptr); P(struct RArray, as.ary);
printf("VM_INSN_INFO_TABLE_IMPL %d\n", VM_INSN_INFO_TABLE_IMPL);
printf("VM_FRAME_MAGIC_CFUNC %x MASK %x\n", VM_FRAME_MAGIC_CFUNC, VM_FRAME_MAGIC_MASK);
}
