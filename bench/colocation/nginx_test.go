package main

import (
	"slices"
	"strings"
	"testing"
)

func TestLddPaths(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []string
		err       string
	}{
		{
			name: "Debian's nginx",
			out: "\tlinux-vdso.so.1 (0x00007ffd)\n" +
				"\tlibcrypt.so.1 => /lib/x86_64-linux-gnu/libcrypt.so.1 (0x00007f9e)\n" +
				"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f9e)\n" +
				"\t/lib64/ld-linux-x86-64.so.2 (0x00007f9e)\n",
			want: []string{"/lib/x86_64-linux-gnu/libcrypt.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"},
		},
		{
			name: "a library missing",
			out:  "\tlibpcre2-8.so.0 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n",
			err:  "missing on this machine",
		},
		{name: "a static binary", out: "\tnot a dynamic executable\n", err: "no library"},
		{name: "nothing", out: "", err: "no library"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lddPaths([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("lddPaths: error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("lddPaths = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestNginxConfListensWhereTheClientSends(t *testing.T) {
	conf := nginxConf("127.0.0.1:41234")
	for _, want := range []string{"listen 127.0.0.1:41234;", "daemon off;", "access_log off;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nginx.conf lacks %q:\n%s", want, conf)
		}
	}
}
