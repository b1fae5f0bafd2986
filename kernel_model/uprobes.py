"""placeholder"""
class Uprobes:
    def __init__(self, kernel):
        self.kernel = kernel
    def handle_int3(self, task, regs): return False
    def handle_debug(self, task, regs): return False
    def abort_xol_on_fault(self, task, regs): pass
