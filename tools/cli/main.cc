#include <iostream>
int main() { std::cout << "reforge\n"; return 0; }
