package images

import (
	"bytes"
	"encoding/binary"
)

// The sandbox ("pause") image's program: it holds a pod's namespaces and
// does nothing else. It is a static x86-64 Linux executable of 288 bytes
// that sqlkube writes itself, so no registry is needed for the sandbox
// image. What it does, in the order of pauseCode:
//
//	rt_sigaction(SIGTERM, &exitAction, NULL, 8)
//	rt_sigaction(SIGINT,  &exitAction, NULL, 8)
//	rt_sigaction(SIGCHLD, &ignore,     NULL, 8)  // the kernel reaps children
//	loop: pause(); goto loop
//	exitAction's handler: exit_group(0)
//
// As PID 1 of a pod it would ignore SIGTERM without a handler, so the
// runtime could only stop it by SIGKILL after a timeout.

const (
	elfBase      = 0x400000
	elfHeaderLen = 64
	phdrLen      = 56
	codeOff      = elfHeaderLen + phdrLen // the code follows the headers
	handlerOff   = 0x5a                   // offset of the handler in pauseCode
	actionOff    = 0x68                   // offset of exitAction
	ignoreOff    = 0x88                   // offset of ignore
	saRestorer   = 0x04000000             // x86-64 signal delivery needs a restorer
)

// pauseCode is the machine code; its two sigaction structs follow it and
// are filled in by pauseELF.
var pauseCode = []byte{
	0xb8, 0x0d, 0x00, 0x00, 0x00, // mov eax, 13 (rt_sigaction)
	0xbf, 0x0f, 0x00, 0x00, 0x00, // mov edi, 15 (SIGTERM)
	0x48, 0x8d, 0x35, 0x57, 0x00, 0x00, 0x00, // lea rsi, [rip+exitAction]
	0x31, 0xd2, // xor edx, edx
	0x41, 0xba, 0x08, 0x00, 0x00, 0x00, // mov r10d, 8 (sizeof sigset)
	0x0f, 0x05, // syscall
	0xb8, 0x0d, 0x00, 0x00, 0x00, // mov eax, 13
	0xbf, 0x02, 0x00, 0x00, 0x00, // mov edi, 2 (SIGINT)
	0x48, 0x8d, 0x35, 0x3c, 0x00, 0x00, 0x00, // lea rsi, [rip+exitAction]
	0x31, 0xd2, // xor edx, edx
	0x41, 0xba, 0x08, 0x00, 0x00, 0x00, // mov r10d, 8
	0x0f, 0x05, // syscall
	0xb8, 0x0d, 0x00, 0x00, 0x00, // mov eax, 13
	0xbf, 0x11, 0x00, 0x00, 0x00, // mov edi, 17 (SIGCHLD)
	0x48, 0x8d, 0x35, 0x41, 0x00, 0x00, 0x00, // lea rsi, [rip+ignore]
	0x31, 0xd2, // xor edx, edx
	0x41, 0xba, 0x08, 0x00, 0x00, 0x00, // mov r10d, 8
	0x0f, 0x05, // syscall
	0xb8, 0x22, 0x00, 0x00, 0x00, // loop: mov eax, 34 (pause)
	0x0f, 0x05, // syscall
	0xeb, 0xf7, // jmp loop
	0xb8, 0xe7, 0x00, 0x00, 0x00, // handler: mov eax, 231 (exit_group)
	0x31, 0xff, // xor edi, edi
	0x0f, 0x05, // syscall
	0x0f, 0x1f, 0x44, 0x00, 0x00, // nop (pads to 8 bytes)
}

// PauseProgram returns the pause executable.
func PauseProgram() []byte {
	var code bytes.Buffer
	code.Write(pauseCode)
	handler := uint64(elfBase + codeOff + handlerOff)
	le := binary.LittleEndian
	for _, sa := range [][4]uint64{
		{handler, saRestorer, handler, 0}, // exitAction: sa_handler, sa_flags, sa_restorer, sa_mask
		{1, saRestorer, handler, 0},       // ignore: SIG_IGN
	} {
		for _, v := range sa {
			_ = binary.Write(&code, le, v)
		}
	}
	size := uint64(codeOff + code.Len())

	var b bytes.Buffer
	// ELF header (64-bit, little endian, executable, x86-64).
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	for _, v := range []any{
		uint16(2), uint16(62), uint32(1), // e_type EXEC, e_machine x86-64, e_version
		uint64(elfBase + codeOff),       // e_entry
		uint64(elfHeaderLen), uint64(0), // e_phoff, e_shoff
		uint32(0),                                        // e_flags
		uint16(elfHeaderLen), uint16(phdrLen), uint16(1), // e_ehsize, e_phentsize, e_phnum
		uint16(0), uint16(0), uint16(0), // e_shentsize, e_shnum, e_shstrndx
		// The one program header: the whole file, loaded read+execute at elfBase.
		uint32(1), uint32(5), // p_type LOAD, p_flags R+X
		uint64(0), uint64(elfBase), uint64(elfBase), // p_offset, p_vaddr, p_paddr
		size, size, uint64(0x1000), // p_filesz, p_memsz, p_align
	} {
		_ = binary.Write(&b, le, v)
	}
	b.Write(code.Bytes())
	return b.Bytes()
}
