package grouptransport

import "os"

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func readlink(p string) (string, error) { return os.Readlink(p) }
